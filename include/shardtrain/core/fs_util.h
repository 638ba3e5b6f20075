// Files of a run folder: written so that a crash or a full disk never leaves a
// half-written file under its final name, and every failure says the path and
// the operating system's reason.
//
//   write_file_atomic("runs/q/config.toml", text);   // "<path>.tmp", fsync, rename
//   append_line("runs/q/result.jsonl", json_line);   // one write(2) per line
//   std::string text = read_file("runs/q/config.toml", "the run's config");
//   require_free_space("runs/q", bytes, "checkpoint runs/q/checkpoint_000003.h5");
//
// Failures throw shardtrain::Error naming the path and the reason, e.g.
//   cannot write runs/q/config.toml.tmp: No space left on device (ENOSPC)
// and leave no temporary file behind.
//
// Temporary files: the writers here name them "<final>.tmp"; the checkpoint
// writer names them "<final>.tmp-<job id>". A job that is killed leaves them
// behind; remove_stale_temp_files() deletes them at the next start of the same
// run, once that job holds the run folder's lock (train/run_lock.h), because
// then no other job can be writing in the folder.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace shardtrain {

// strerror text plus the symbolic name: "No space left on device (ENOSPC)".
std::string os_error_text(int errno_value);

// Writes `content` to "<path>.tmp", flushes it to disk (fsync), renames it to
// `path` (atomic on POSIX file systems) and fsyncs the directory. On any
// failure the temporary file is removed and Error names the path and the
// reason; `path` is then untouched (the old content, or no file).
void write_file_atomic(const std::string& path, const std::string& content);

// Appends `line` and a newline to `path` (created if missing) with a single
// write(2), so concurrent appenders never interleave within a line. A failed
// or short write is cut back to the previous end of the file, then Error.
void append_line(const std::string& path, const std::string& line);

// The whole content of `path`. Error "<what>: cannot read <path>: <reason>".
std::string read_file(const std::string& path, const std::string& what);

// Error unless `path` names a regular file (after following symbolic links),
// checked before anything opens it: a folder, a FIFO (opening it would block),
// a socket or device, a symbolic-link loop or a missing file each get their own
// message, "<what> = '<path>': is a folder, not a file" and so on.
void require_regular_file(const std::string& path, const std::string& what);

// Bytes available to an unprivileged writer on the file system holding
// `directory` (statvfs f_bavail x f_frsize); nullopt when statvfs fails.
std::optional<uint64_t> free_bytes(const std::string& directory);

// Error when the file system of `directory` has fewer than `bytes` free:
//   No space left on device (ENOSPC): <what> needs 1.2 GiB, 310.0 MiB are free on the file system of <directory>
// Does nothing when the free space cannot be read (the write itself will report).
void require_free_space(const std::string& directory, uint64_t bytes, const std::string& what);

// Allocates the blocks of bytes [0, end) of the existing file `path`
// (fallocate), so that writing them later cannot fail for lack of space. Error
// when the file system is full or a quota is reached:
//   No space left on device (ENOSPC): reserving 1.2 GiB for <what> in <path> (310.0 MiB free ...)
// Nothing happens on file systems that cannot preallocate (the writes will
// report), or for end == 0. `keep_size`: the blocks are allocated past the end
// of the file without changing its size (FALLOC_FL_KEEP_SIZE), for writes a
// library will make there (HDF5's metadata at flush).
void reserve_file_space(const std::string& path, uint64_t end, const std::string& what, bool keep_size = false);

// The likely operating-system reason a write to `path` just failed, when a
// library (MPI-IO) did not pass errno on: "No space left on device (ENOSPC)"
// when its file system has (almost) nothing free, "Read-only file system
// (EROFS)", "File too large (EFBIG)" past this process's file size limit;
// "" when none of these holds.
std::string explain_write_failure(const std::string& path);

// A file name the writers above or the checkpoint writer use for a temporary
// file: "<name>.tmp" or "<name>.tmp-<job id>" (job id: letters, digits, '.', '_', '-').
bool is_temp_file_name(const std::string& file_name);

// Deletes the temporary files (is_temp_file_name) directly inside `run_dir`,
// except those ending in ".tmp-<keep_job_id>" when keep_job_id is not empty.
// Call it only while holding the run folder's lock. Returns the paths removed;
// a file that cannot be removed is skipped (its path is not returned).
std::vector<std::string> remove_stale_temp_files(const std::string& run_dir, const std::string& keep_job_id = "");

// `path` made absolute with every symlink and ".." resolved; for a file that
// does not exist yet, its parent's real path and its name.
std::string real_path(const std::string& path);

// Error, before anything is written, when writing `output` (the value of
// `output_flag`) would replace an input of the command: the file `input` (the
// value of `input_flag`), or, for a folder input, any path inside it or a hard
// link to one of its files. Paths compare by real_path, files also by inode
// (hard links), so no spelling of the input gets past it.
void refuse_output_over_input(const std::string& output_flag, const std::string& output, const std::string& input_flag,
                              const std::string& input);

}  // namespace shardtrain
