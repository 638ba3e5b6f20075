// CheckpointWriter: one collective HDF5 file per checkpoint, committed by an
// atomic rename (include/shardtrain/checkpoint/checkpoint.h; docs/DESIGN.md,
// "Checkpoints").
#include "checkpoint/writer_impl.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_format.h"
#include "checkpoint/hdf5_handles.h"
#include "shardtrain/checkpoint/checkpoint.h"
#include "shardtrain/comm/mpi_helpers.h"
#include "shardtrain/comm/watchdog.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/fatal_guard.h"
#include "shardtrain/core/fs_util.h"

namespace shardtrain {
namespace detail {

std::string file_directory(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::optional<uint64_t> end_of_allocation(hid_t file) {
  hsize_t size = 0;
  if (H5Fget_filesize(file, &size) < 0) {
    H5Eclear2(H5E_DEFAULT);
    return std::nullopt;
  }
  return static_cast<uint64_t>(size);
}

}  // namespace detail

namespace {

// Below this much free space no checkpoint is started (the disk is full; the
// same bound as core/fs_util.h's explain_write_failure).
constexpr uint64_t kMinimumFreeBytes = uint64_t{1} << 20;

// The names of the root's links or attributes (identical on every rank: the
// metadata is replicated), for deleting them.
std::vector<std::string> root_names(hid_t file, bool attributes) {
  std::vector<std::string> names;
  if (attributes)
    H5Aiterate2(file, H5_INDEX_NAME, H5_ITER_INC, nullptr,
                [](hid_t, const char* name, const H5A_info_t*, void* out) -> herr_t {
                  static_cast<std::vector<std::string>*>(out)->push_back(name);
                  return 0;
                },
                &names);
  else
    H5Literate(file, H5_INDEX_NAME, H5_ITER_INC, nullptr,
               [](hid_t, const char* name, const H5L_info_t*, void* out) -> herr_t {
                 static_cast<std::vector<std::string>*>(out)->push_back(name);
                 return 0;
               },
               &names);
  return names;
}

}  // namespace

CheckpointWriter::CheckpointWriter(const std::string& final_path, MPI_Comm comm) : impl_(std::make_unique<Impl>()) {
  detail::silence_hdf5_printing();
  Impl& w = *impl_;
  w.final_path = final_path;
  w.comm = comm;
  ST_CHECK_MPI(MPI_Comm_rank(comm, &w.rank));
  ST_CHECK_MPI(MPI_Comm_size(comm, &w.size));

  const std::string job_id = rank0_value(comm, w.phase("checking the directory"), [&] {
    struct stat info {};
    const std::string directory = detail::file_directory(final_path);
    if (stat(directory.c_str(), &info) != 0 || !S_ISDIR(info.st_mode))
      throw Error("checkpoint directory " + directory + " does not exist (writing " + final_path + ")");
    // A disk already full is refused before the file exists: closing an
    // HDF5 file needs a few blocks for its superblock and root group, and on
    // a disk with none the collective close could not complete.
    const std::optional<uint64_t> available = free_bytes(directory);
    if (available && *available < kMinimumFreeBytes)
      throw Error("cannot write checkpoint " + final_path + ": " + explain_write_failure(final_path) +
                  "; free some space (or move run.storage_path) and run again");
    const char* slurm = std::getenv("SLURM_JOB_ID");
    const std::string id = slurm && *slurm ? std::string(slurm) : std::to_string(getpid());
    // The temporary name is this job's own (the run lock keeps other jobs
    // out): a file there is what an earlier attempt of this job left, and goes.
    // Anything else there (a link, a folder) is not written through or over
    // (core/fs_util.h, "What an output path may be").
    const std::string temporary = final_path + ".tmp-" + id;
    struct stat existing {};
    if (lstat(temporary.c_str(), &existing) == 0) {
      if (!S_ISREG(existing.st_mode))
        throw Error("cannot write checkpoint " + final_path + ": its temporary name " + temporary +
                    " is taken by something that is not a file (a link or a folder); move it away");
      std::remove(temporary.c_str());
    }
    return id;
  });
  w.temporary_path = final_path + ".tmp-" + job_id;

  detail::PropertyList fapl(ST_CHECK_HDF5(H5Pcreate(H5P_FILE_ACCESS)));
  ST_CHECK_HDF5(H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL));
  // ~200 tensors x 3 groups: let rank 0 do metadata reads and write the
  // metadata collectively at flush instead of every rank hitting the file.
  ST_CHECK_HDF5(H5Pset_all_coll_metadata_ops(fapl.get(), 1));
  ST_CHECK_HDF5(H5Pset_coll_metadata_write(fapl.get(), 1));
  // The 1.8 format stores large groups and attributes (> 64 KiB, e.g. a long
  // config) in dense storage; h5py and HDF5 >= 1.8 read it.
  ST_CHECK_HDF5(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V18));
  std::string problem;
  {
    PhaseGuard guard(comm, w.phase("creating " + w.temporary_path));
    errno = 0;
    w.file = detail::File(H5Fcreate(w.temporary_path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()));
    if (!w.file.valid())
      problem = "cannot create checkpoint " + w.temporary_path + ": " +
                detail::io_failure_reason(errno, w.temporary_path);
  }
  try {
    throw_if_any_failed(problem, comm, w.phase("creating the file"));
  } catch (const Error&) {
    if (w.file.valid()) {
      PhaseGuard guard(comm, w.phase("closing the file that could not be created everywhere"));
      w.file.close();
    }
    if (w.rank == 0) std::remove(w.temporary_path.c_str());
    throw;
  }

  try {
    set_attribute(detail::kFormatAttribute, detail::kFormatVersion);
    set_attribute(detail::kWorldSizeAttribute, static_cast<int64_t>(w.size));
    set_attribute(detail::kChecksumAlgorithmAttribute, detail::kChecksumAlgorithm);
  } catch (const std::exception&) {
    w.abandon();  // no destructor runs for a constructor that throws
    throw;
  }
}

CheckpointWriter::~CheckpointWriter() {
  if (!impl_ || impl_->committed) return;
  impl_->abandon();
}

// Not committed (an exception, a full disk, or the caller gave up): the
// partial file must never be mistaken for a checkpoint and must not keep the
// disk full, so it goes away; final_path is untouched.
void CheckpointWriter::Impl::abandon() {
  Impl& w = *this;
  if (w.file.valid()) {
    // The EOA bound before the deletes below (which only shrink what the
    // close writes).
    const std::optional<uint64_t> eoa = w.rank == 0 ? detail::end_of_allocation(w.file.get()) : std::nullopt;
    // What was written goes first, collectively (every rank deletes the same
    // names): deleted objects' metadata is dropped from the cache instead of
    // written, so the close writes little more than the superblock and the
    // root group, at the start of the file.
    for (const std::string& name : root_names(w.file.get(), /*attributes=*/false))
      H5Ldelete(w.file.get(), name.c_str(), H5P_DEFAULT);
    for (const std::string& name : root_names(w.file.get(), /*attributes=*/true))
      H5Adelete(w.file.get(), name.c_str());
    // Parallel HDF5 writes the rest of its metadata cache at the close,
    // collectively, below its EOA. The reserved blocks cover it (the
    // constructor's and each attribute's [0, EOA + 64 KiB), each group's data
    // end + 64 KiB): they are kept, since freeing them would let another
    // writer on a full disk take them, and the flush would then meet ENOSPC
    // on one rank and hang (seen in the chaos soak and in
    // checkpoint_full_disk_mid_write). Only when nothing was reserved, or
    // the EOA is known to reach past the reservation, are the blocks freed
    // first (the file is deleted below anyway), so that the flush finds room.
    if (w.rank == 0 && (w.reserved_end == 0 || (eoa && *eoa + detail::kMetadataHeadroom > w.reserved_end)) &&
        ::truncate(w.temporary_path.c_str(), 0) != 0) {
      // Nothing to free: the close below meets what the disk allows.
    }
    try {
      barrier(w.comm, w.phase("freeing the abandoned file's blocks"));
    } catch (const std::exception&) {
      // A rank gone or stuck: the watchdog ends the job; nothing to add here.
    }
    // Parallel HDF5 flushes the metadata cache here, collectively: after a
    // write failed on one rank (a full disk) the ranks may no longer agree on
    // what to flush and the close can hang; the watchdog then ends the job,
    // and its message must say why the file was abandoned.
    PhaseGuard guard(w.comm, w.phase(w.failure.empty() ? "closing the abandoned file"
                                                       : "closing the file abandoned after: " + w.failure));
    w.file.close();  // collective; a failure (the disk is still full) changes nothing here
  }
  if (w.rank == 0) std::remove(w.temporary_path.c_str());
}

const std::string& CheckpointWriter::final_path() const { return impl_->final_path; }
const std::string& CheckpointWriter::temporary_path() const { return impl_->temporary_path; }
MPI_Comm CheckpointWriter::comm() const { return impl_->comm; }

void CheckpointWriter::set_attribute(const std::string& key, int64_t value) try {
  impl_->set_scalar_attribute(key, value, H5T_STD_I64LE, H5T_NATIVE_INT64);
} catch (const std::exception& e) {
  impl_->remember_failure(e);
  throw;
}

void CheckpointWriter::set_attribute(const std::string& key, double value) try {
  impl_->set_scalar_attribute(key, value, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE);
} catch (const std::exception& e) {
  impl_->remember_failure(e);
  throw;
}

void CheckpointWriter::set_attribute(const std::string& key, const std::string& value) try {
  Impl& w = *impl_;
  w.check_open("set_attribute");
  w.refuse_reserved(key);
  w.write_string_attribute(key, value);
} catch (const std::exception& e) {
  impl_->remember_failure(e);
  throw;
}

void CheckpointWriter::set_attribute(const std::string& key, const std::vector<uint8_t>& bytes) try {
  Impl& w = *impl_;
  w.check_open("set_attribute");
  w.refuse_reserved(key);
  std::string text = broadcast_string(std::string(bytes.begin(), bytes.end()), w.comm, w.phase("attribute " + key));
  {
    PhaseGuard guard(w.comm, w.phase("attribute " + key));
    hsize_t length = text.size();
    detail::Dataspace space(ST_CHECK_HDF5(H5Screate_simple(1, &length, nullptr)));
    w.write_attribute(w.file.get(), key, H5T_STD_U8LE, H5T_NATIVE_UINT8, space.get(), text.data());
  }
  w.reserve_metadata_room("attribute " + key);
  w.record_checksum(key, detail::AttributeKind::kBytes, text);
} catch (const std::exception& e) {
  impl_->remember_failure(e);
  throw;
}

void CheckpointWriter::commit() try {
  Impl& w = *impl_;
  w.check_open("commit");
  w.write_checksum_table();
  // The metadata (object headers, the groups' links and heaps, attributes)
  // is written at the flush below, collectively, at addresses HDF5 has
  // already allocated below its end of allocation (EOA). ENOSPC inside that
  // flush on one rank leaves the ranks disagreeing on what is still to write,
  // and parallel HDF5 hangs (seen in the chaos soak); so [0, EOA + 64 KiB) is
  // reserved first where the EOA is known (a file without data), and each
  // group reserved its data's end + 64 KiB, so that a full disk fails cleanly
  // on every rank before the flush (docs/DESIGN.md, "Errors and hangs").
  w.reserve_metadata_room("its data and the metadata written at close");
  std::string problem;
  {
    // Metadata is written here, collectively: a full disk may show only now.
    PhaseGuard guard(w.comm, w.phase("flushing and closing " + w.temporary_path));
    errno = 0;
    if (H5Fflush(w.file.get(), H5F_SCOPE_GLOBAL) < 0)
      problem = w.write_failure("", detail::io_failure_reason(errno, w.temporary_path));
    errno = 0;
    if (w.file.close() < 0 && problem.empty())
      problem = w.write_failure("", detail::io_failure_reason(errno, w.temporary_path));
  }
  throw_if_any_failed(problem, w.comm, w.phase("agreeing on the flush"));
  barrier(w.comm, w.phase("every rank closed the file"));
  on_rank0(w.comm, w.phase("renaming it to its final name"), [&] {
    // Data must be on disk before the name says "complete".
    const int fd = open(w.temporary_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
      const int error = errno;
      if (fd >= 0) ::close(fd);
      throw Error("cannot write checkpoint " + w.temporary_path + " (fsync): " + os_error_text(error));
    }
    ::close(fd);
    refuse_if_fatal_in_progress("renaming " + w.temporary_path + " to " + w.final_path);
    if (std::rename(w.temporary_path.c_str(), w.final_path.c_str()) != 0)
      throw Error("cannot rename " + w.temporary_path + " to " + w.final_path + ": " + os_error_text(errno));
    const int directory = open(detail::file_directory(w.final_path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (directory >= 0) {
      fsync(directory);
      ::close(directory);
    }
  });
  w.committed = true;
} catch (const std::exception& e) {
  impl_->remember_failure(e);
  throw;
}

}  // namespace shardtrain
