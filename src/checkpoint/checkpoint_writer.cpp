// CheckpointWriter: one collective HDF5 file per checkpoint, committed by an
// atomic rename (include/shardtrain/checkpoint/checkpoint.h; docs/DESIGN.md,
// "Checkpoints").
#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint_format.h"
#include "checkpoint/digest.h"
#include "checkpoint/dtypes.h"
#include "checkpoint/flat_range_io.h"
#include "checkpoint/hdf5_handles.h"
#include "checkpoint/slice_plan.h"
#include "shardtrain/checkpoint/checkpoint.h"
#include "shardtrain/comm/mpi_helpers.h"
#include "shardtrain/comm/watchdog.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/fatal_guard.h"
#include "shardtrain/core/fs_util.h"

namespace shardtrain {
namespace {

std::string file_directory(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Reserved beyond HDF5's end of allocation, for the metadata it allocates
// while it flushes (docs/DESIGN.md, "Errors and hangs").
constexpr uint64_t kMetadataHeadroom = uint64_t{64} << 10;
// Below this much free space no checkpoint is started (the disk is full; the
// same bound as core/fs_util.h's explain_write_failure).
constexpr uint64_t kMinimumFreeBytes = uint64_t{1} << 20;

// An upper bound of HDF5's end of allocation (EOA) of an open file: its
// H5Fget_filesize, max(EOA, EOF). H5Fget_eoa itself refuses the MPI-IO
// driver (it wants a SWMR-compatible one), and that driver forgets its EOF at
// every raw data write, so this answers only until the file's first dataset
// write; nothing after (write_group then bounds the EOA by its data's end).
std::optional<uint64_t> end_of_allocation(hid_t file) {
  hsize_t size = 0;
  if (H5Fget_filesize(file, &size) < 0) {
    H5Eclear2(H5E_DEFAULT);
    return std::nullopt;
  }
  return static_cast<uint64_t>(size);
}

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

struct CheckpointWriter::Impl {
  std::string final_path, temporary_path;
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  detail::File file;
  bool committed = false;
  std::vector<std::string> written_groups;
  // Rank 0: the end of the blocks reserved so far ([0, reserved_end) is on disk).
  uint64_t reserved_end = 0;
  // Why the file is being abandoned (the first error a method threw), so that
  // a close that cannot complete still names the cause when it times out.
  std::string failure;
  // Every root attribute's kind and checksum (identical on every rank: the
  // values are rank 0's), and whether the table in the file is up to date.
  std::map<std::string, detail::AttributeChecksum> attribute_checksums;
  bool checksum_table_current = false;

  void record_checksum(const std::string& key, detail::AttributeKind kind, const std::string& value_bytes) {
    attribute_checksums[key] = {kind, detail::attribute_checksum(kind, value_bytes)};
    checksum_table_current = false;
  }
  void refuse_reserved(const std::string& key) const {
    if (key == detail::kAttributeChecksumsAttribute)
      throw Error(final_path + ": '" + key + "' is the writer's own attribute; use another name");
  }
  // Rank 0's text as a variable-length UTF-8 root attribute, its metadata room reserved.
  void write_string_attribute(const std::string& key, const std::string& value) {
    std::string text = broadcast_string(value, comm, phase("attribute " + key));
    if (text.find('\0') != std::string::npos)
      throw Error(final_path + ": string attribute '" + key + "' contains a NUL byte; store it as bytes");
    {
      PhaseGuard guard(comm, phase("attribute " + key));
      // Variable-length UTF-8: h5py returns it as str, and an empty string is fine.
      detail::Datatype type(ST_CHECK_HDF5(H5Tcopy(H5T_C_S1)));
      ST_CHECK_HDF5(H5Tset_size(type.get(), H5T_VARIABLE));
      ST_CHECK_HDF5(H5Tset_cset(type.get(), H5T_CSET_UTF8));
      detail::Dataspace scalar(ST_CHECK_HDF5(H5Screate(H5S_SCALAR)));
      const char* pointer = text.c_str();
      write_attribute(file.get(), key, type.get(), type.get(), scalar.get(), &pointer);
    }
    reserve_metadata_room("attribute " + key);
    if (key != detail::kAttributeChecksumsAttribute) record_checksum(key, detail::AttributeKind::kString, text);
  }
  // The checksum table, when an attribute changed since it was last written.
  // Written before the first group (then the train state's attributes and the
  // table lie in the blocks the groups reserve from offset 0, docs/DESIGN.md,
  // "Errors and hangs") and at commit for attributes set after the groups.
  void write_checksum_table() {
    if (checksum_table_current) return;
    write_string_attribute(detail::kAttributeChecksumsAttribute, detail::encode_attribute_checksums(attribute_checksums));
    checksum_table_current = true;
  }

  // Each public method's handler (a function-try-block) calls this.
  void remember_failure(const std::exception& e) {
    if (failure.empty()) failure = e.what();
  }

  std::string phase(const std::string& what) const { return "checkpoint write " + final_path + ": " + what; }
  // Rank 0 reserves the blocks of [0, EOA + 64 KiB) once the metadata HDF5
  // has allocated (the root group, attributes, object headers) reaches past
  // what is reserved. Parallel HDF5 writes that metadata at the close,
  // collectively, at those addresses: a block missing there when the disk has
  // filled up meets ENOSPC on one rank only, and the close hangs. Reserved
  // first, a full disk fails here, cleanly on every rank, and an abandoned
  // file still closes (docs/DESIGN.md, "Errors and hangs").
  void reserve_metadata_room(const std::string& what) {
    on_rank0(comm, phase("reserving room for the metadata of " + what), [&] {
      const std::optional<uint64_t> eoa = end_of_allocation(file.get());
      if (!eoa || *eoa + kMetadataHeadroom <= reserved_end) return;  // no EOA: the flush will report
      const uint64_t end = *eoa + kMetadataHeadroom;
      reserve_file_space(temporary_path, end, "checkpoint " + final_path + " (" + what + ")", /*keep_size=*/true);
      reserved_end = end;
    });
  }
  void abandon();
  // `location`: the file (root attributes) or a dataset. A collective metadata
  // operation: every rank passes the same value.
  void write_attribute(hid_t location, const std::string& key, hid_t file_type, hid_t memory_type, hid_t space,
                       const void* value) {
    if (ST_CHECK_HDF5(H5Aexists(location, key.c_str()))) ST_CHECK_HDF5(H5Adelete(location, key.c_str()));
    detail::Attribute attribute(
        ST_CHECK_HDF5(H5Acreate2(location, key.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT)));
    ST_CHECK_HDF5(H5Awrite(attribute.get(), memory_type, value));
  }
  // A number as a root attribute: rank 0's value, stored as `file_type`.
  template <class T>
  void set_scalar_attribute(const std::string& key, T value, hid_t file_type, hid_t memory_type) {
    check_open("set_attribute");
    refuse_reserved(key);
    value = broadcast_value(value, comm, phase("attribute " + key));
    {
      PhaseGuard guard(comm, phase("attribute " + key));
      detail::Dataspace scalar(ST_CHECK_HDF5(H5Screate(H5S_SCALAR)));
      write_attribute(file.get(), key, file_type, memory_type, scalar.get(), &value);
    }
    reserve_metadata_room("attribute " + key);
    // The 8 bytes attribute_checksum() takes for an int64 or a double.
    record_checksum(key, std::is_floating_point<T>::value ? detail::AttributeKind::kFloat : detail::AttributeKind::kInteger,
                    std::string(reinterpret_cast<const char*>(&value), sizeof(value)));
  }
  void check_open(const char* method) const {
    if (!file.valid())
      throw Error(std::string("CheckpointWriter::") + method + " called after commit() on " + final_path);
  }
  std::string write_failure(const std::string& what, const std::string& reason) const {
    return "cannot write checkpoint " + temporary_path + (what.empty() ? "" : " (" + what + ")") + ": " + reason;
  }
};

CheckpointWriter::CheckpointWriter(const std::string& final_path, MPI_Comm comm) : impl_(std::make_unique<Impl>()) {
  detail::silence_hdf5_printing();
  Impl& w = *impl_;
  w.final_path = final_path;
  w.comm = comm;
  ST_CHECK_MPI(MPI_Comm_rank(comm, &w.rank));
  ST_CHECK_MPI(MPI_Comm_size(comm, &w.size));

  const std::string job_id = rank0_value(comm, w.phase("checking the directory"), [&] {
    struct stat info {};
    const std::string directory = file_directory(final_path);
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
    const std::optional<uint64_t> eoa = w.rank == 0 ? end_of_allocation(w.file.get()) : std::nullopt;
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
    if (w.rank == 0 && (w.reserved_end == 0 || (eoa && *eoa + kMetadataHeadroom > w.reserved_end)) &&
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

void CheckpointWriter::write_group(const std::string& group, const std::vector<TensorSlice>& slices) try {
  Impl& w = *impl_;
  w.check_open("write_group");
  detail::check_group_name(group);
  const std::string where = w.final_path + ": /" + group;

  std::vector<detail::SliceRecord> mine;
  std::vector<at::Tensor> host_data;  // CPU contiguous copies where needed
  for (const auto& slice : slices) {
    if (slice.name.empty() || slice.name.find('/') != std::string::npos)
      throw Error(where + ": tensor name '" + slice.name + "' must be non-empty and contain no '/'");
    if (!slice.data.defined()) throw Error(where + "/" + slice.name + ": slice has no data");
    mine.push_back(detail::record_of(slice, w.rank, where));
    host_data.push_back(slice.data.to(at::kCPU).contiguous().view({-1}));
  }
  // Validation happens on the gathered records, so every rank throws alike.
  if (std::find(w.written_groups.begin(), w.written_groups.end(), group) != w.written_groups.end())
    throw Error(where + ": group written twice in one checkpoint");
  if (w.written_groups.empty()) w.write_checksum_table();
  std::map<std::string, detail::TensorPlan> plans = detail::plan_group(
      detail::exchange_records(mine, w.comm, w.phase("/" + group + ": exchanging the slices")), where,
      /*require_exact_cover=*/true);
  w.written_groups.push_back(group);

  // A full disk is found before anything of the group is written. The margin
  // covers HDF5's metadata (object headers, the group's B-tree).
  uint64_t group_bytes = uint64_t{1} << 20;
  for (const auto& [name, plan] : plans)
    group_bytes += static_cast<uint64_t>(detail::numel_of(plan.shape)) *
                       at::elementSize(detail::dtype_table()[static_cast<size_t>(plan.dtype)].scalar_type) + 4096;
  on_rank0(w.comm, w.phase("/" + group + ": checking free space"), [&] {
    require_free_space(file_directory(w.final_path), group_bytes, "checkpoint " + w.final_path + " (/" + group + ")");
  });

  std::map<std::string, std::vector<size_t>> my_slices_by_name;
  for (size_t i = 0; i < slices.size(); ++i) my_slices_by_name[slices[i].name].push_back(i);

  // Each rank hashes what it owns; the sum over ranks is the dataset's checksum.
  std::vector<uint64_t> checksums;
  for (const auto& [name, plan] : plans) {
    uint64_t sum = 0;
    for (size_t i : my_slices_by_name[name])
      sum += detail::digest(host_data[i].data_ptr(), plan.dtype, slices[i].begin, host_data[i].numel()).checksum;
    checksums.push_back(sum);
  }
  all_reduce_in_place(checksums.data(), static_cast<int>(checksums.size()), MPI_UINT64_T, MPI_SUM, w.comm,
                      w.phase("/" + group + ": combining checksums"));

  detail::PropertyList link_create(ST_CHECK_HDF5(H5Pcreate(H5P_LINK_CREATE)));
  ST_CHECK_HDF5(H5Pset_create_intermediate_group(link_create.get(), 1));
  detail::Group group_id;
  {
    PhaseGuard guard(w.comm, w.phase("creating /" + group));
    group_id = detail::Group(
        ST_CHECK_HDF5(H5Gcreate2(w.file.get(), group.c_str(), link_create.get(), H5P_DEFAULT, H5P_DEFAULT)));
  }

  detail::PropertyList dataset_create(ST_CHECK_HDF5(H5Pcreate(H5P_DATASET_CREATE)));
  // Every element is written (exact cover is checked above): skip the fill pass.
  ST_CHECK_HDF5(H5Pset_alloc_time(dataset_create.get(), H5D_ALLOC_TIME_EARLY));
  ST_CHECK_HDF5(H5Pset_fill_time(dataset_create.get(), H5D_FILL_TIME_NEVER));
  detail::PropertyList dxpl = detail::collective_transfer();
  detail::Dataspace scalar(ST_CHECK_HDF5(H5Screate(H5S_SCALAR)));

  // All datasets first (their space is allocated at creation), so rank 0 can
  // reserve the group's bytes in the file before anything is written: a full
  // disk or a quota then fails here, cleanly, instead of inside a collective
  // MPI-IO write, after which parallel HDF5 may not be able to close the file.
  std::vector<detail::Dataset> datasets;
  uint64_t end_of_data = 0;
  {
    PhaseGuard guard(w.comm, w.phase("creating the datasets of /" + group));
    size_t index = 0;
    for (const auto& [name, plan] : plans) {
      const uint64_t checksum = checksums[index++];
      detail::Dataspace file_space = detail::make_file_space(plan.shape);
      detail::Dataset dataset(ST_CHECK_HDF5(H5Dcreate2(group_id.get(), name.c_str(),
                                                       detail::dtype_table()[plan.dtype].file_type, file_space.get(),
                                                       H5P_DEFAULT, dataset_create.get(), H5P_DEFAULT)));
      w.write_attribute(dataset.get(), detail::kChecksumAttribute, H5T_STD_U64LE, H5T_NATIVE_UINT64, scalar.get(),
                        &checksum);
      const haddr_t offset = H5Dget_offset(dataset.get());
      if (offset != HADDR_UNDEF)
        end_of_data = std::max<uint64_t>(end_of_data, offset + H5Dget_storage_size(dataset.get()));
      datasets.push_back(std::move(dataset));
    }
  }
  // With the metadata allocated so far (the datasets' headers, the group's
  // links, the root attributes written before) and headroom: at commit the
  // metadata flush then writes into blocks already on disk.
  on_rank0(w.comm, w.phase("/" + group + ": reserving its space"), [&] {
    const uint64_t end = std::max(end_of_data, end_of_allocation(w.file.get()).value_or(0)) + kMetadataHeadroom;
    reserve_file_space(w.temporary_path, end, "checkpoint " + w.final_path + " (/" + group + ")");
    w.reserved_end = std::max(w.reserved_end, end);
  });

  size_t index = 0;
  for (const auto& [name, plan] : plans) {
    detail::Dataset& dataset = datasets[index++];
    const std::string full = detail::join_group(group, name);
    PhaseGuard guard(w.comm, w.phase(full));
    if (detail::numel_of(plan.shape) == 0) continue;  // nothing to write, on every rank alike

    std::vector<std::pair<int64_t, int64_t>> ranges;
    std::vector<size_t> order = my_slices_by_name[name];
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return slices[a].begin < slices[b].begin; });
    at::Tensor buffer;
    if (order.size() == 1) {
      buffer = host_data[order[0]];
    } else if (order.size() > 1) {
      std::vector<at::Tensor> pieces;
      for (size_t i : order) pieces.push_back(host_data[i]);
      buffer = at::cat(pieces);
    }
    for (size_t i : order) ranges.emplace_back(slices[i].begin, host_data[i].numel());
    std::string problem =
        detail::transfer(/*writing=*/true, dataset.get(), plan.shape, plan.dtype, ranges,
                         buffer.defined() ? buffer.data_ptr() : nullptr, dxpl.get(), w.temporary_path);
    if (!problem.empty()) problem = w.write_failure(full, problem);
    throw_if_any_failed(problem, w.comm, w.phase(full + ": agreeing on the write"));
  }
  for (detail::Dataset& dataset : datasets) dataset.close_or_abort();
  group_id.close_or_abort();
} catch (const std::exception& e) {
  impl_->remember_failure(e);
  throw;
}

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
    const int directory = open(file_directory(w.final_path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
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
