// Files a command writes: never half-written under their final name, never
// replacing what is at their path by something else, and every failure names
// the path and the operating system's reason.
//
//   write_file_atomic("runs/q/config.toml", text);   // whole content, through OutputFile
//   OutputFile out(flags.output, "--output");         // streamed: predict, tokenize, export
//   out.write(chunk); ...; out.commit();
//   append_line("runs/q/result.jsonl", json_line);   // one write(2) per line
//   std::string text = read_file("runs/q/config.toml", "the run's config");
//   require_free_space("runs/q", bytes, "checkpoint runs/q/checkpoint_000003.h5");
//
// Failures throw shardtrain::Error naming the path and the reason, e.g.
//   cannot write runs/q/config.toml: No space left on device (ENOSPC)
// and leave no temporary file behind.
//
// What an output path may be (docs/outputs-and-integrity.md):
//   - nothing yet, or a regular file: a new temporary file in the same folder
//     ("<name>.tmp-XXXXXX", created by mkstemp: never an existing file), fsynced,
//     then renamed over the path, so a reader sees the old file or the new one;
//   - a symbolic link: followed (every link of a chain); the file it names is
//     written as above and the link stays;
//   - a device, FIFO or other file that is not regular (/dev/stdout, /dev/null,
//     a named pipe): opened and written in place, never renamed over;
//   - "-": standard output;
//   - a folder, a socket, a loop of links, "": refused before anything is written.
//
// Temporary files: OutputFile names them "<final>.tmp-XXXXXX"; the checkpoint
// writer "<final>.tmp-<job id>". A job that is killed leaves them behind;
// remove_stale_temp_files() deletes them at the next start of the same run,
// once that job holds the run folder's lock (train/run_lock.h), because then no
// other job can be writing in the folder.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace shardtrain {

// strerror text plus the symbolic name: "No space left on device (ENOSPC)".
std::string os_error_text(int errno_value);

// One output file, written as the top of this file says. Rank-local; not
// copyable. Streams: write() as often as needed, then commit().
class OutputFile {
 public:
  // Opens the output (a temporary file, the device or FIFO itself, or standard
  // output for "-"). `what` prefixes messages about the path itself ("--output",
  // "config.json of the export"); errors of the writes name the path alone.
  // Error for "", a folder, a socket, a link loop or a file that cannot be
  // created (the OS's reason).
  explicit OutputFile(const std::string& path, const std::string& what = "");
  // Without commit(): the temporary file is removed and the path is untouched
  // (an output written in place keeps what was written).
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  // Appends `size` bytes. Error (the temporary file removed) when the write fails.
  void write(const void* data, size_t size);
  void write(const std::string& text) { write(text.data(), text.size()); }
  // Flushes to disk (fsync), renames the temporary file over the target and
  // fsyncs its folder; in place: closes it. Error and nothing renamed on failure.
  void commit();

  const std::string& path() const { return path_; }
  // The file written: `path` with every symbolic link followed.
  const std::string& target() const { return target_; }
  // True for standard output, a device, a FIFO: no temporary file, no rename.
  bool in_place() const { return temporary_.empty(); }

 private:
  void discard();
  [[noreturn]] void fail(const std::string& action, int error);
  std::string path_, target_, temporary_;
  int fd_ = -1;
  bool committed_ = false;
};

// OutputFile(path) with `content`, committed: the old content or the new one
// under `path`, never half of it; `path` is untouched on failure.
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

// A file name OutputFile or the checkpoint writer uses for a temporary file:
// "<name>.tmp-<id>" (id: letters, digits, '.', '_', '-'), or "<name>.tmp" as
// earlier versions named them.
bool is_temp_file_name(const std::string& file_name);

// Deletes the temporary files (is_temp_file_name) directly inside `run_dir`,
// except those ending in ".tmp-<keep_job_id>" when keep_job_id is not empty.
// Call it only while holding the run folder's lock. Returns the paths removed;
// a file that cannot be removed is skipped (its path is not returned).
std::vector<std::string> remove_stale_temp_files(const std::string& run_dir, const std::string& keep_job_id = "");

// Error when `path`, or a folder on the way to it, is a loop of symbolic
// links (stat(2) fails with ELOOP), checked before std::filesystem calls that
// would throw a bare filesystem_error on it; `what` names the flag or key:
//   --output 'out/model': 'out' is a loop of symbolic links (Too many levels of
//   symbolic links (ELOOP)); point --output at a real path
void refuse_link_loop(const std::string& path, const std::string& what);

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
