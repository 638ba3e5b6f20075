// CheckpointReader: reading a checkpoint collectively, whatever world size and
// partition wrote it (include/shardtrain/checkpoint/checkpoint.h;
// docs/DESIGN.md, "Checkpoints"). What the file's metadata means is judged by
// checkpoint/checkpoint_format.h; this file fetches it.
#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <cerrno>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include "checkpoint/attributes.h"
#include "checkpoint/checkpoint_format.h"
#include "checkpoint/digest.h"
#include "checkpoint/dtypes.h"
#include "checkpoint/flat_range_io.h"
#include "checkpoint/hdf5_handles.h"
#include "checkpoint/slice_plan.h"
#include "checkpoint/verify.h"
#include "shardtrain/checkpoint/checkpoint.h"
#include "shardtrain/comm/mpi_helpers.h"
#include "shardtrain/comm/watchdog.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain {
namespace {

// Whether `path` exists in the file. H5Lexists fails (rather than returning
// false) when an intermediate group is missing, so walk the path one
// component at a time. Error naming `file_path` when the file's structure
// cannot be read.
bool link_exists(hid_t location, const std::string& path, const std::string& file_path) {
  std::string prefix;
  std::stringstream parts(path);
  std::string part;
  while (std::getline(parts, part, '/')) {
    if (part.empty()) continue;
    prefix += "/" + part;
    const htri_t exists = H5Lexists(location, prefix.c_str(), H5P_DEFAULT);
    if (exists < 0) throw Error(file_path + ": cannot read " + prefix + ": " + detail::damage_reason());
    if (!exists) return false;
  }
  return true;
}

}  // namespace

struct CheckpointReader::Impl {
  std::string path;
  MPI_Comm comm = MPI_COMM_NULL;
  detail::File file;
  bool has_checksums = false;
  bool attribute_checksums = false;

  ~Impl() {
    if (!file.valid()) return;
    PhaseGuard guard(comm, phase("closing"));  // H5Fclose of an MPI-IO file is collective
    file.close();
  }

  std::string phase(const std::string& what) const { return "checkpoint read " + path + ": " + what; }
  // An HDF5 metadata call that failed: the file's structure is damaged.
  template <class T>
  T ok(T status, const std::string& what) const {
    if (status < 0) throw Error(path + ": cannot read " + what + ": " + detail::damage_reason());
    return status;
  }
  detail::Dataset open_dataset(const std::string& group, const std::string& name) const {
    const std::string full = detail::join_group(group, name);
    if (!link_exists(file.get(), full, path))
      throw Error(path + ": dataset " + full + " does not exist in the checkpoint");
    return detail::Dataset(ok(H5Dopen2(file.get(), full.c_str(), H5P_DEFAULT), "dataset " + full));
  }
  std::vector<int64_t> dataset_shape(hid_t dataset, const std::string& full) const {
    detail::Dataspace space(ok(H5Dget_space(dataset), "the shape of " + full));
    int ndim = ok(H5Sget_simple_extent_ndims(space.get()), "the shape of " + full);
    std::vector<hsize_t> dims(static_cast<size_t>(ndim));
    if (ndim > 0) ok(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), "the shape of " + full);
    return std::vector<int64_t>(dims.begin(), dims.end());
  }
  int dataset_dtype(hid_t dataset, const std::string& full) const {
    detail::Datatype type(ok(H5Dget_type(dataset), "the type of " + full));
    int code = detail::dtype_code_of_file_type(type.get());
    if (code < 0) throw Error(path + ": dataset " + full + " has a type shardtrain cannot read");
    return code;
  }
  // The checksum written with the dataset; nullopt for a file without checksums.
  std::optional<uint64_t> stored_checksum(hid_t dataset, const std::string& full) const {
    if (!has_checksums) return std::nullopt;
    if (!ok(H5Aexists(dataset, detail::kChecksumAttribute), "the checksum of " + full))
      throw Error(path + ": tensor " + full + " has no checksum although the file has them: the file was "
                  "modified after it was written; use another checkpoint");
    detail::Attribute attribute(
        ok(H5Aopen(dataset, detail::kChecksumAttribute, H5P_DEFAULT), "the checksum of " + full));
    uint64_t value = 0;
    ok(H5Aread(attribute.get(), H5T_NATIVE_UINT64, &value), "the checksum of " + full);
    return value;
  }
  // The root attribute `key` of `kind`, as bytes (checkpoint/attributes.h).
  std::string attribute_bytes(const std::string& key, detail::AttributeKind kind) const {
    return detail::read_attribute_bytes(file.get(), path, key, kind);
  }
  // One dataset of read(): reads this rank's slices (`my_slices`, indices into
  // `slices`) and, on rank 0, whatever no rank asked for, so that the whole
  // dataset is hashed; adds this rank's share of the dataset's checksum and
  // non-finite count to *checksum and *non_finite.
  void read_dataset(hid_t dataset, const std::string& full, const detail::TensorPlan& plan, int rank,
                    const std::vector<size_t>& my_slices, std::vector<TensorSlice>& slices, hid_t dxpl,
                    uint64_t* checksum, int64_t* non_finite) const;
};

CheckpointReader::CheckpointReader(const std::string& path, MPI_Comm comm) : impl_(std::make_unique<Impl>()) {
  detail::silence_hdf5_printing();
  Impl& r = *impl_;
  r.path = path;
  r.comm = comm;
  on_rank0(comm, r.phase("checking the file"), [&] { detail::check_checkpoint_file(path); });

  detail::PropertyList fapl(ST_CHECK_HDF5(H5Pcreate(H5P_FILE_ACCESS)));
  ST_CHECK_HDF5(H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL));
  std::string problem;
  {
    PhaseGuard guard(comm, r.phase("opening"));
    errno = 0;
    r.file = detail::File(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()));
    if (!r.file.valid()) problem = "cannot open checkpoint " + path + ": " + detail::io_failure_reason(errno, "");
  }
  throw_if_any_failed(problem, comm, r.phase("agreeing on the open"));
  r.has_checksums = has_attribute(detail::kChecksumAlgorithmAttribute);
  if (r.has_checksums) detail::check_checksum_algorithm(path, string_attribute(detail::kChecksumAlgorithmAttribute));
  // The attributes (the model config, the tokenizer's files, the run config,
  // the training state) against their checksums, on every rank: each reads
  // the same metadata, and any rank's problem is every rank's Error.
  std::string damage;
  try {
    r.attribute_checksums = detail::check_attribute_checksums(r.file.get(), path).has_table;
  } catch (const Error& e) {
    damage = e.what();
  }
  throw_if_any_failed(damage, comm, r.phase("checking the attributes' checksums"));
  if (!r.has_checksums || !r.attribute_checksums) {
    // Once per file and process: a resume scans a run folder and opens its files more than once.
    static std::mutex mutex;
    static std::set<std::string> told;
    std::lock_guard<std::mutex> lock(mutex);
    if (told.insert(path).second)
      log_warn(r.has_checksums ? "%s was written without checksums of its attributes (by an older shardtrain): its "
                                 "model config, tokenizer and training state cannot be verified"
                               : "%s was written without checksums (by an older shardtrain): its data cannot be verified",
               path.c_str());
  }
}

CheckpointReader::~CheckpointReader() = default;

const std::string& CheckpointReader::path() const { return impl_->path; }
bool CheckpointReader::has_checksums() const { return impl_->has_checksums; }

std::vector<std::string> CheckpointReader::names(const std::string& group) const {
  const Impl& r = *impl_;
  detail::check_group_name(group);
  if (!link_exists(r.file.get(), "/" + group, r.path))
    throw Error(r.path + ": group /" + group + " does not exist in the checkpoint");
  detail::Group group_id(r.ok(H5Gopen2(r.file.get(), group.c_str(), H5P_DEFAULT), "group /" + group));
  std::vector<std::string> out;
  auto collect = [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
    static_cast<std::vector<std::string>*>(data)->emplace_back(name);
    return 0;
  };
  r.ok(H5Literate(group_id.get(), H5_INDEX_NAME, H5_ITER_INC, nullptr, collect, &out), "group /" + group);
  return out;
}

bool CheckpointReader::has(const std::string& group, const std::string& name) const {
  return link_exists(impl_->file.get(), detail::join_group(group, name), impl_->path);
}

std::vector<int64_t> CheckpointReader::shape(const std::string& group, const std::string& name) const {
  detail::Dataset dataset = impl_->open_dataset(group, name);
  return impl_->dataset_shape(dataset.get(), detail::join_group(group, name));
}

at::ScalarType CheckpointReader::dtype(const std::string& group, const std::string& name) const {
  detail::Dataset dataset = impl_->open_dataset(group, name);
  return detail::dtype_table()[impl_->dataset_dtype(dataset.get(), detail::join_group(group, name))].scalar_type;
}

void CheckpointReader::Impl::read_dataset(hid_t dataset, const std::string& full, const detail::TensorPlan& plan,
                                          int rank, const std::vector<size_t>& my_slices,
                                          std::vector<TensorSlice>& slices, hid_t dxpl, uint64_t* checksum,
                                          int64_t* non_finite) const {
  const auto& table = detail::dtype_table();
  const int64_t numel = detail::numel_of(plan.shape);
  if (numel == 0) return;
  // What this rank reads: its slices, and on rank 0 whatever no rank asked
  // for, so that the whole dataset is hashed. slice == -1 marks such a gap.
  struct Piece {
    int64_t begin, count;
    long slice;
  };
  std::vector<Piece> pieces;
  for (size_t i : my_slices)
    if (slices[i].data.numel() > 0) pieces.push_back({slices[i].begin, slices[i].data.numel(), static_cast<long>(i)});
  if (rank == 0)
    for (const auto& [begin, count] : detail::uncovered(plan.records, numel)) pieces.push_back({begin, count, -1});
  std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.begin < b.begin; });
  std::vector<std::pair<int64_t, int64_t>> ranges;
  int64_t total = 0;
  for (const Piece& p : pieces) {
    ranges.emplace_back(p.begin, p.count);
    total += p.count;
  }
  // Read straight into the caller's tensor when it is the one CPU contiguous
  // piece; otherwise through a staging buffer.
  at::Tensor buffer;
  if (pieces.size() == 1 && pieces[0].slice >= 0) {
    const at::Tensor& data = slices[static_cast<size_t>(pieces[0].slice)].data;
    if (data.device().is_cpu() && data.is_contiguous()) buffer = data;
  }
  const bool direct = buffer.defined();
  if (!direct && total > 0) buffer = at::empty({total}, at::TensorOptions().dtype(table[plan.dtype].scalar_type));
  {
    PhaseGuard guard(comm, phase(full));
    std::string problem =
        detail::transfer(/*writing=*/false, dataset, plan.shape, plan.dtype, ranges,
                         buffer.defined() ? buffer.data_ptr() : nullptr, dxpl, path);
    throw_if_any_failed(problem.empty() ? problem : "cannot read checkpoint " + path + " (" + full + "): " + problem,
                        comm, phase(full + ": agreeing on the read"));
  }
  const auto* bytes = buffer.defined() ? static_cast<const unsigned char*>(buffer.data_ptr()) : nullptr;
  const int64_t element_size = static_cast<int64_t>(at::elementSize(table[plan.dtype].scalar_type));
  int64_t offset = 0;
  for (const Piece& p : pieces) {
    // Elements a lower rank also read are hashed there, not here.
    const auto claims = p.slice < 0 ? std::vector<std::pair<int64_t, int64_t>>{{p.begin, p.count}}
                                    : detail::first_claims(plan.records, rank, p.begin, p.count);
    for (const auto& [begin, count] : claims) {
      const detail::RangeDigest d =
          detail::digest(bytes + (offset + begin - p.begin) * element_size, plan.dtype, begin, count);
      *checksum += d.checksum;
      *non_finite += d.non_finite;
    }
    if (!direct && p.slice >= 0) {
      at::Tensor& data = slices[static_cast<size_t>(p.slice)].data;
      data.copy_(buffer.narrow(0, offset, p.count).view(data.sizes()));
    }
    offset += p.count;
  }
}

void CheckpointReader::read(const std::string& group, std::vector<TensorSlice>& slices) {
  Impl& r = *impl_;
  detail::check_group_name(group);
  const std::string where = r.path + ": /" + group;
  int rank = 0;
  ST_CHECK_MPI(MPI_Comm_rank(r.comm, &rank));
  std::vector<detail::SliceRecord> mine;
  for (const auto& slice : slices) {
    if (!slice.data.defined()) throw Error(where + "/" + slice.name + ": slice has no data tensor to fill");
    mine.push_back(detail::record_of(slice, rank, where));
  }
  std::map<std::string, detail::TensorPlan> plans = detail::plan_group(
      detail::exchange_records(mine, r.comm, r.phase("/" + group + ": exchanging the requests")), where,
      /*require_exact_cover=*/false);

  // Validate everything first: every rank checks the same union of requests,
  // so an Error is thrown on all ranks before any collective read starts.
  const auto& table = detail::dtype_table();
  std::vector<detail::Dataset> datasets;
  std::vector<std::optional<uint64_t>> stored;
  for (const auto& [name, plan] : plans) {
    const std::string full = detail::join_group(group, name);
    detail::Dataset dataset = r.open_dataset(group, name);
    std::vector<int64_t> file_shape = r.dataset_shape(dataset.get(), full);
    int file_dtype = r.dataset_dtype(dataset.get(), full);
    if (file_shape != plan.shape || file_dtype != plan.dtype)
      throw Error(r.path + ": dataset " + full + " is " + table[file_dtype].name + " " +
                  shape_text(file_shape) + " in the checkpoint but " + table[plan.dtype].name + " " +
                  shape_text(plan.shape) + " was expected");
    stored.push_back(r.stored_checksum(dataset.get(), full));
    datasets.push_back(std::move(dataset));
  }

  std::map<std::string, std::vector<size_t>> my_slices_by_name;
  for (size_t i = 0; i < slices.size(); ++i) my_slices_by_name[slices[i].name].push_back(i);
  detail::PropertyList dxpl = detail::collective_transfer();
  // Per dataset: this rank's share of the checksum and of the non-finite count.
  std::vector<uint64_t> checksums(plans.size(), 0);
  std::vector<int64_t> non_finite(plans.size(), 0);
  size_t index = 0;
  for (const auto& [name, plan] : plans) {
    const size_t k = index++;
    r.read_dataset(datasets[k].get(), detail::join_group(group, name), plan, rank, my_slices_by_name[name], slices,
                   dxpl.get(), &checksums[k], &non_finite[k]);
  }

  all_reduce_in_place(checksums.data(), static_cast<int>(checksums.size()), MPI_UINT64_T, MPI_SUM, r.comm,
                      r.phase("/" + group + ": combining checksums"));
  all_reduce_in_place(non_finite.data(), static_cast<int>(non_finite.size()), MPI_INT64_T, MPI_SUM, r.comm,
                      r.phase("/" + group + ": counting non-finite values"));
  index = 0;
  for (const auto& [name, plan] : plans) {
    const size_t k = index++;
    const std::string full = detail::join_group(group, name);
    if (stored[k] && *stored[k] != checksums[k]) detail::checksum_mismatch(r.path, full, *stored[k], checksums[k]);
    if (non_finite[k] > 0) detail::non_finite_values(r.path, full, non_finite[k]);
  }
}

at::Tensor CheckpointReader::read_tensor(const std::string& group, const std::string& name) const {
  const Impl& r = *impl_;
  const std::string full = detail::join_group(group, name);
  detail::Dataset dataset = r.open_dataset(group, name);
  std::vector<int64_t> shape = r.dataset_shape(dataset.get(), full);
  const int code = r.dataset_dtype(dataset.get(), full);
  const detail::DtypeInfo& info = detail::dtype_table()[static_cast<size_t>(code)];
  const std::optional<uint64_t> stored = r.stored_checksum(dataset.get(), full);
  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(info.scalar_type));
  if (out.numel() == 0) return out;
  errno = 0;
  if (H5Dread(dataset.get(), info.memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data_ptr()) < 0)
    throw Error("cannot read checkpoint " + r.path + " (" + full + "): " + detail::io_failure_reason(errno, ""));
  const detail::RangeDigest d = detail::digest(out.data_ptr(), code, 0, out.numel());
  if (stored && *stored != d.checksum) detail::checksum_mismatch(r.path, full, *stored, d.checksum);
  if (d.non_finite > 0) detail::non_finite_values(r.path, full, d.non_finite);
  return out;
}

bool CheckpointReader::has_attribute(const std::string& key) const {
  return impl_->ok(H5Aexists(impl_->file.get(), key.c_str()), "attribute '" + key + "'") > 0;
}

bool CheckpointReader::has_attribute_checksums() const { return impl_->attribute_checksums; }

std::vector<std::string> CheckpointReader::attribute_names() const {
  return detail::root_attribute_names(impl_->file.get(), impl_->path);
}

int64_t CheckpointReader::int_attribute(const std::string& key) const {
  const std::string bytes = impl_->attribute_bytes(key, detail::AttributeKind::kInteger);
  int64_t value = 0;
  std::memcpy(&value, bytes.data(), sizeof(value));
  return value;
}

double CheckpointReader::double_attribute(const std::string& key) const {
  const std::string bytes = impl_->attribute_bytes(key, detail::AttributeKind::kFloat);
  double value = 0;
  std::memcpy(&value, bytes.data(), sizeof(value));
  return value;
}

std::string CheckpointReader::string_attribute(const std::string& key) const {
  return impl_->attribute_bytes(key, detail::AttributeKind::kString);
}

std::vector<uint8_t> CheckpointReader::bytes_attribute(const std::string& key) const {
  const std::string bytes = impl_->attribute_bytes(key, detail::AttributeKind::kBytes);
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

}  // namespace shardtrain
