#include "shardtrain/checkpoint/checkpoint.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>
#include <utility>

#include "shardtrain/core/check.h"

namespace shardtrain {
namespace {

constexpr int64_t kFormatVersion = 1;
constexpr const char* kFormatAttribute = "shardtrain_format_version";
constexpr const char* kWorldSizeAttribute = "writer_world_size";

// ---- RAII owners for HDF5 ids ------------------------------------------------

template <herr_t (*Close)(hid_t)>
class H5Id {
 public:
  H5Id() = default;
  explicit H5Id(hid_t id) : id_(id) {}
  ~H5Id() { reset(); }
  H5Id(H5Id&& other) noexcept : id_(other.id_) { other.id_ = H5I_INVALID_HID; }
  H5Id& operator=(H5Id&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = other.id_;
      other.id_ = H5I_INVALID_HID;
    }
    return *this;
  }
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;
  hid_t get() const { return id_; }
  // Closes now, aborting the job if HDF5 reports an error (a destructor cannot).
  void close() {
    if (id_ >= 0) ST_CHECK_HDF5(Close(id_));
    id_ = H5I_INVALID_HID;
  }

 private:
  void reset() {
    if (id_ >= 0) Close(id_);
    id_ = H5I_INVALID_HID;
  }
  hid_t id_ = H5I_INVALID_HID;
};

using File = H5Id<H5Fclose>;
using Group = H5Id<H5Gclose>;
using Dataset = H5Id<H5Dclose>;
using Dataspace = H5Id<H5Sclose>;
using Datatype = H5Id<H5Tclose>;
using Attribute = H5Id<H5Aclose>;
using PropertyList = H5Id<H5Pclose>;

// Turns off HDF5's error-stack printing while we probe for things that may
// legitimately be absent (a user error we report ourselves).
class QuietHdf5Errors {
 public:
  QuietHdf5Errors() {
    H5Eget_auto2(H5E_DEFAULT, &function_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~QuietHdf5Errors() { H5Eset_auto2(H5E_DEFAULT, function_, data_); }

 private:
  H5E_auto2_t function_ = nullptr;
  void* data_ = nullptr;
};

// ---- small helpers -------------------------------------------------------------

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

struct DtypeInfo {
  at::ScalarType scalar_type;
  hid_t memory_type;  // native, for H5Dread / H5Dwrite
  hid_t file_type;    // fixed little-endian, for H5Dcreate
  const char* name;
};

// Codes travel between ranks as the index into this table.
const std::vector<DtypeInfo>& dtype_table() {
  static const std::vector<DtypeInfo> table = {{at::kFloat, H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, "float32"},
          {at::kDouble, H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, "float64"},
          {at::kInt, H5T_NATIVE_INT32, H5T_STD_I32LE, "int32"},
          {at::kLong, H5T_NATIVE_INT64, H5T_STD_I64LE, "int64"}};
  return table;
}

int dtype_code(at::ScalarType type, const std::string& where) {
  const auto& table = dtype_table();
  for (size_t i = 0; i < table.size(); ++i)
    if (table[i].scalar_type == type) return static_cast<int>(i);
  throw Error(where + ": unsupported dtype " + std::string(c10::toString(type)) +
              " (checkpoints hold float32, float64, int32, int64)");
}

// The table index of a dataset's file type, or -1.
int dtype_code_of_file_type(hid_t file_type) {
  const auto& table = dtype_table();
  H5T_class_t type_class = H5Tget_class(file_type);
  size_t size = H5Tget_size(file_type);
  for (size_t i = 0; i < table.size(); ++i)
    if (H5Tget_class(table[i].file_type) == type_class && H5Tget_size(table[i].file_type) == size)
      return static_cast<int>(i);
  return -1;
}

std::string join_group(const std::string& group, const std::string& name) { return "/" + group + "/" + name; }

void check_group_name(const std::string& group) {
  if (group.empty() || group.front() == '/' || group.back() == '/' || group.find("//") != std::string::npos)
    throw Error("checkpoint group name '" + group + "' must be a relative path like 'model' or 'optim/exp_avg'");
}

// A rank's contribution to one group, as seen by every rank after the exchange.
struct SliceRecord {
  int rank = 0;
  std::string name;
  int dtype = 0;
  std::vector<int64_t> shape;
  int64_t begin = 0, count = 0;
};

template <class T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}
template <class T>
T take(const char*& in) {
  T value;
  std::memcpy(&value, in, sizeof(T));
  in += sizeof(T);
  return value;
}

// Allgather of every rank's slice metadata (names, shapes, ranges), so that all
// ranks agree on which datasets exist and validate them identically.
std::vector<SliceRecord> exchange_records(const std::vector<SliceRecord>& mine, MPI_Comm comm) {
  std::string bytes;
  put<int64_t>(bytes, static_cast<int64_t>(mine.size()));
  for (const auto& r : mine) {
    put<int64_t>(bytes, static_cast<int64_t>(r.name.size()));
    bytes += r.name;
    put<int32_t>(bytes, r.dtype);
    put<int64_t>(bytes, static_cast<int64_t>(r.shape.size()));
    for (int64_t d : r.shape) put<int64_t>(bytes, d);
    put<int64_t>(bytes, r.begin);
    put<int64_t>(bytes, r.count);
  }
  int size = 0;
  MPI_Comm_size(comm, &size);
  int my_length = static_cast<int>(bytes.size());
  std::vector<int> lengths(size), offsets(size);
  ST_CHECK_MPI(MPI_Allgather(&my_length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm));
  int total = 0;
  for (int i = 0; i < size; ++i) {
    offsets[i] = total;
    total += lengths[i];
  }
  std::string all(static_cast<size_t>(total), '\0');
  ST_CHECK_MPI(MPI_Allgatherv(bytes.data(), my_length, MPI_CHAR, all.data(), lengths.data(), offsets.data(),
                              MPI_CHAR, comm));
  std::vector<SliceRecord> records;
  for (int rank = 0; rank < size; ++rank) {
    const char* in = all.data() + offsets[rank];
    auto num_records = take<int64_t>(in);
    for (int64_t i = 0; i < num_records; ++i) {
      SliceRecord r;
      r.rank = rank;
      auto name_length = take<int64_t>(in);
      r.name.assign(in, static_cast<size_t>(name_length));
      in += name_length;
      r.dtype = take<int32_t>(in);
      auto ndim = take<int64_t>(in);
      for (int64_t d = 0; d < ndim; ++d) r.shape.push_back(take<int64_t>(in));
      r.begin = take<int64_t>(in);
      r.count = take<int64_t>(in);
      records.push_back(std::move(r));
    }
  }
  return records;
}

// One tensor of a group: its agreed shape and dtype, and every rank's ranges.
struct TensorPlan {
  std::vector<int64_t> shape;
  int dtype = 0;
  std::vector<SliceRecord> records;
};

// Groups the records by tensor name (sorted, so every rank visits datasets in
// the same order) and checks what can be checked without the file. `where`
// names the group for messages.
std::map<std::string, TensorPlan> plan_group(const std::vector<SliceRecord>& records, const std::string& where,
                                             bool require_exact_cover) {
  const auto& table = dtype_table();
  std::map<std::string, TensorPlan> plans;
  for (const auto& r : records) {
    auto found = plans.find(r.name);
    if (found == plans.end()) {
      plans[r.name] = TensorPlan{r.shape, r.dtype, {r}};
      continue;
    }
    TensorPlan& plan = found->second;
    const SliceRecord& first = plan.records.front();
    if (plan.shape != r.shape || plan.dtype != r.dtype)
      throw Error(where + "/" + r.name + ": ranks disagree on the tensor: rank " + std::to_string(first.rank) +
                  " has " + table[first.dtype].name + " " + shape_string(first.shape) + ", rank " +
                  std::to_string(r.rank) + " has " + table[r.dtype].name + " " + shape_string(r.shape));
    plan.records.push_back(r);
  }
  for (auto& [name, plan] : plans) {
    const int64_t numel = numel_of(plan.shape);
    for (const auto& r : plan.records) {
      if (r.begin < 0 || r.count < 0 || r.begin + r.count > numel)
        throw Error(where + "/" + name + ": rank " + std::to_string(r.rank) + "'s slice [" +
                    std::to_string(r.begin) + ", " + std::to_string(r.begin + r.count) +
                    ") is outside the tensor's " + std::to_string(numel) + " elements (shape " +
                    shape_string(plan.shape) + ")");
    }
    // Sorted by (begin, rank): overlap checks need neighbours in flat order.
    std::vector<SliceRecord> sorted = plan.records;
    std::sort(sorted.begin(), sorted.end(), [](const SliceRecord& a, const SliceRecord& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.rank < b.rank;
    });
    if (require_exact_cover) {
      int64_t next = 0;
      for (const auto& r : sorted) {
        if (r.count == 0) continue;
        if (r.begin != next)
          throw Error(where + "/" + name + ": the ranks' slices " +
                      (r.begin > next ? "leave elements [" + std::to_string(next) + ", " + std::to_string(r.begin) +
                                            ") unwritten"
                                      : "overlap at element " + std::to_string(r.begin) + " (rank " +
                                            std::to_string(r.rank) + ")"));
        next = r.begin + r.count;
      }
      if (next != numel)
        throw Error(where + "/" + name + ": the ranks' slices leave elements [" + std::to_string(next) + ", " +
                    std::to_string(numel) + ") unwritten");
    } else {
      std::map<int, int64_t> end_by_rank;
      for (const auto& r : sorted) {
        if (r.count == 0) continue;
        auto it = end_by_rank.find(r.rank);
        if (it != end_by_rank.end() && r.begin < it->second)
          throw Error(where + "/" + name + ": rank " + std::to_string(r.rank) +
                      " requests overlapping slices at element " + std::to_string(r.begin));
        end_by_rank[r.rank] = r.begin + r.count;
      }
    }
  }
  return plans;
}

// Selects the flat element range [begin, end) of a row-major dataspace as a
// union of boxes. Greedy from `begin`: take the largest block (a run along the
// outermost possible dimension) that starts aligned and fits; this yields at
// most 2 * rank - 1 boxes (partial innermost rows up to an aligned start, whole
// blocks, then partial rows down to `end`).
void select_flat_range(hid_t space, const std::vector<int64_t>& shape, int64_t begin, int64_t end, bool* first) {
  const size_t rank = shape.size();
  if (rank == 0) {
    ST_CHECK_HDF5(H5Sselect_all(space));
    *first = false;
    return;
  }
  std::vector<int64_t> stride(rank, 1);
  for (size_t k = rank - 1; k > 0; --k) stride[k - 1] = stride[k] * shape[k];
  std::vector<hsize_t> start(rank), count(rank);
  int64_t position = begin;
  while (position < end) {
    size_t dim = rank - 1;
    for (size_t k = 0; k < rank; ++k) {
      if (position % stride[k] == 0 && position + stride[k] <= end) {
        dim = k;
        break;
      }
    }
    int64_t remainder = position;
    for (size_t k = 0; k < rank; ++k) {
      start[k] = static_cast<hsize_t>(remainder / stride[k]);
      remainder %= stride[k];
    }
    const int64_t room_in_dim = shape[dim] - static_cast<int64_t>(start[dim]);
    const int64_t steps = std::min((end - position) / stride[dim], room_in_dim);
    for (size_t k = 0; k < rank; ++k)
      count[k] = k < dim ? 1 : (k == dim ? static_cast<hsize_t>(steps) : static_cast<hsize_t>(shape[k]));
    ST_CHECK_HDF5(H5Sselect_hyperslab(space, *first ? H5S_SELECT_SET : H5S_SELECT_OR, start.data(), nullptr,
                                      count.data(), nullptr));
    *first = false;
    position += steps * stride[dim];
  }
}

Dataspace make_file_space(const std::vector<int64_t>& shape) {
  if (shape.empty()) return Dataspace(ST_CHECK_HDF5(H5Screate(H5S_SCALAR)));
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  return Dataspace(ST_CHECK_HDF5(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)));
}

PropertyList collective_transfer() {
  PropertyList dxpl(ST_CHECK_HDF5(H5Pcreate(H5P_DATASET_XFER)));
  ST_CHECK_HDF5(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE));
  return dxpl;
}

// One collective H5Dread or H5Dwrite of this rank's ranges of a dataset (none
// -> empty selection). `ranges` are (begin, count) sorted by begin, disjoint;
// `buffer` holds their elements back to back.
void transfer(bool writing, hid_t dataset, const TensorPlan& plan, const std::vector<std::pair<int64_t, int64_t>>& ranges,
              void* buffer, hid_t dxpl) {
  Dataspace file_space = make_file_space(plan.shape);
  int64_t total = 0;
  bool first = true;
  for (const auto& [begin, count] : ranges) {
    if (count == 0) continue;
    select_flat_range(file_space.get(), plan.shape, begin, begin + count, &first);
    total += count;
  }
  hsize_t memory_length = static_cast<hsize_t>(std::max<int64_t>(total, 1));
  Dataspace memory_space(ST_CHECK_HDF5(H5Screate_simple(1, &memory_length, nullptr)));
  static char dummy[8];
  if (total == 0) {
    ST_CHECK_HDF5(H5Sselect_none(file_space.get()));
    ST_CHECK_HDF5(H5Sselect_none(memory_space.get()));
    buffer = dummy;
  }
  hid_t memory_type = dtype_table()[plan.dtype].memory_type;
  if (writing)
    ST_CHECK_HDF5(H5Dwrite(dataset, memory_type, memory_space.get(), file_space.get(), dxpl, buffer));
  else
    ST_CHECK_HDF5(H5Dread(dataset, memory_type, memory_space.get(), file_space.get(), dxpl, buffer));
}

bool link_exists(hid_t location, const std::string& path) {
  // H5Lexists fails (rather than returning false) when an intermediate group is
  // missing, so walk the path one component at a time.
  std::string prefix;
  std::stringstream parts(path);
  std::string part;
  while (std::getline(parts, part, '/')) {
    if (part.empty()) continue;
    prefix += "/" + part;
    htri_t exists = ST_CHECK_HDF5(H5Lexists(location, prefix.c_str(), H5P_DEFAULT));
    if (!exists) return false;
  }
  return true;
}

std::string file_directory(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Rank 0 decides, every rank learns the outcome: an empty string means success.
std::string broadcast_string(std::string text, MPI_Comm comm) {
  int64_t length = static_cast<int64_t>(text.size());
  ST_CHECK_MPI(MPI_Bcast(&length, 1, MPI_INT64_T, 0, comm));
  text.resize(static_cast<size_t>(length));
  if (length > 0) ST_CHECK_MPI(MPI_Bcast(text.data(), static_cast<int>(length), MPI_CHAR, 0, comm));
  return text;
}

int rank_of(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return rank;
}

}  // namespace

// ---- slices of a flat shard ----------------------------------------------------

std::vector<TensorSlice> slices_of_shard(const std::vector<FlatTensor>& layout, int64_t shard_begin,
                                         const at::Tensor& shard) {
  const int64_t shard_end = shard_begin + shard.numel();
  at::Tensor flat = shard.view({-1});
  std::vector<TensorSlice> slices;
  for (const auto& tensor : layout) {
    const int64_t begin = std::max(tensor.offset, shard_begin);
    const int64_t end = std::min(tensor.offset + numel_of(tensor.shape), shard_end);
    // An empty tensor is in every shard, so its dataset is still created.
    if (begin >= end && numel_of(tensor.shape) > 0) continue;
    if (begin >= end) {
      slices.push_back(TensorSlice{tensor.name, tensor.shape, 0, flat.narrow(0, 0, 0)});
      continue;
    }
    slices.push_back(TensorSlice{tensor.name, tensor.shape, begin - tensor.offset,
                                 flat.narrow(0, begin - shard_begin, end - begin)});
  }
  return slices;
}

// ---- writer ----------------------------------------------------------------------

struct CheckpointWriter::Impl {
  std::string final_path, temporary_path;
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  File file;
  bool committed = false;
  std::vector<std::string> written_groups;

  void write_attribute(const std::string& key, hid_t file_type, hid_t memory_type, hid_t space, const void* value) {
    if (ST_CHECK_HDF5(H5Aexists(file.get(), key.c_str()))) ST_CHECK_HDF5(H5Adelete(file.get(), key.c_str()));
    Attribute attribute(ST_CHECK_HDF5(H5Acreate2(file.get(), key.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT)));
    ST_CHECK_HDF5(H5Awrite(attribute.get(), memory_type, value));
  }
  void check_open(const char* method) const {
    if (!file.get() || file.get() < 0)
      throw Error(std::string("CheckpointWriter::") + method + " called after commit() on " + final_path);
  }
};

CheckpointWriter::CheckpointWriter(const std::string& final_path, MPI_Comm comm) : impl_(std::make_unique<Impl>()) {
  Impl& w = *impl_;
  w.final_path = final_path;
  w.comm = comm;
  MPI_Comm_rank(comm, &w.rank);
  MPI_Comm_size(comm, &w.size);

  std::string job_id;
  std::string problem;
  if (w.rank == 0) {
    const char* slurm = std::getenv("SLURM_JOB_ID");
    job_id = slurm && *slurm ? std::string(slurm) : std::to_string(getpid());
    struct stat info {};
    std::string directory = file_directory(final_path);
    if (stat(directory.c_str(), &info) != 0 || !S_ISDIR(info.st_mode))
      problem = "checkpoint directory " + directory + " does not exist (writing " + final_path + ")";
  }
  problem = broadcast_string(problem, comm);
  if (!problem.empty()) throw Error(problem);
  job_id = broadcast_string(job_id, comm);
  w.temporary_path = final_path + ".tmp-" + job_id;

  PropertyList fapl(ST_CHECK_HDF5(H5Pcreate(H5P_FILE_ACCESS)));
  ST_CHECK_HDF5(H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL));
  // ~200 tensors x 3 groups: let rank 0 do metadata reads and write the
  // metadata collectively at flush instead of every rank hitting the file.
  ST_CHECK_HDF5(H5Pset_all_coll_metadata_ops(fapl.get(), 1));
  ST_CHECK_HDF5(H5Pset_coll_metadata_write(fapl.get(), 1));
  // The 1.8 format stores large groups and attributes (> 64 KiB, e.g. a long
  // config) in dense storage; h5py and HDF5 >= 1.8 read it.
  ST_CHECK_HDF5(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V18));
  w.file = File(ST_CHECK_HDF5(H5Fcreate(w.temporary_path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get())));

  set_attribute(kFormatAttribute, kFormatVersion);
  set_attribute(kWorldSizeAttribute, static_cast<int64_t>(w.size));
}

CheckpointWriter::~CheckpointWriter() {
  if (!impl_ || impl_->committed) return;
  // Not committed (an exception, or the caller gave up): the partial file must
  // never be mistaken for a checkpoint, so it goes away; final_path is untouched.
  impl_->file = File();
  if (impl_->rank == 0) std::remove(impl_->temporary_path.c_str());
}

const std::string& CheckpointWriter::final_path() const { return impl_->final_path; }
const std::string& CheckpointWriter::temporary_path() const { return impl_->temporary_path; }
MPI_Comm CheckpointWriter::comm() const { return impl_->comm; }

void CheckpointWriter::write_group(const std::string& group, const std::vector<TensorSlice>& slices) {
  Impl& w = *impl_;
  w.check_open("write_group");
  check_group_name(group);
  const std::string where = w.final_path + ": /" + group;

  std::vector<SliceRecord> mine;
  std::vector<at::Tensor> host_data;  // CPU contiguous copies where needed
  for (const auto& slice : slices) {
    if (slice.name.empty() || slice.name.find('/') != std::string::npos)
      throw Error(where + ": tensor name '" + slice.name + "' must be non-empty and contain no '/'");
    if (!slice.data.defined()) throw Error(where + "/" + slice.name + ": slice has no data");
    SliceRecord r;
    r.rank = w.rank;
    r.name = slice.name;
    r.dtype = dtype_code(slice.data.scalar_type(), where + "/" + slice.name);
    r.shape = slice.shape;
    r.begin = slice.begin;
    r.count = slice.data.numel();
    mine.push_back(std::move(r));
    host_data.push_back(slice.data.to(at::kCPU).contiguous().view({-1}));
  }
  // Validation happens on the gathered records, so every rank throws alike.
  if (std::find(w.written_groups.begin(), w.written_groups.end(), group) != w.written_groups.end())
    throw Error(where + ": group written twice in one checkpoint");
  std::map<std::string, TensorPlan> plans =
      plan_group(exchange_records(mine, w.comm), where, /*require_exact_cover=*/true);
  w.written_groups.push_back(group);

  PropertyList link_create(ST_CHECK_HDF5(H5Pcreate(H5P_LINK_CREATE)));
  ST_CHECK_HDF5(H5Pset_create_intermediate_group(link_create.get(), 1));
  Group group_id(ST_CHECK_HDF5(H5Gcreate2(w.file.get(), group.c_str(), link_create.get(), H5P_DEFAULT, H5P_DEFAULT)));

  PropertyList dataset_create(ST_CHECK_HDF5(H5Pcreate(H5P_DATASET_CREATE)));
  // Every element is written (exact cover is checked above): skip the fill pass.
  ST_CHECK_HDF5(H5Pset_alloc_time(dataset_create.get(), H5D_ALLOC_TIME_EARLY));
  ST_CHECK_HDF5(H5Pset_fill_time(dataset_create.get(), H5D_FILL_TIME_NEVER));
  PropertyList dxpl = collective_transfer();

  std::map<std::string, std::vector<size_t>> my_slices_by_name;
  for (size_t i = 0; i < slices.size(); ++i) my_slices_by_name[slices[i].name].push_back(i);

  for (const auto& [name, plan] : plans) {
    Dataspace file_space = make_file_space(plan.shape);
    Dataset dataset(ST_CHECK_HDF5(H5Dcreate2(group_id.get(), name.c_str(), dtype_table()[plan.dtype].file_type,
                                             file_space.get(), H5P_DEFAULT, dataset_create.get(), H5P_DEFAULT)));
    if (numel_of(plan.shape) == 0) continue;  // nothing to write, on every rank alike

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
    transfer(/*writing=*/true, dataset.get(), plan, ranges, buffer.defined() ? buffer.data_ptr() : nullptr,
             dxpl.get());
    dataset.close();
  }
  group_id.close();
}

void CheckpointWriter::set_attribute(const std::string& key, int64_t value) {
  Impl& w = *impl_;
  w.check_open("set_attribute");
  ST_CHECK_MPI(MPI_Bcast(&value, 1, MPI_INT64_T, 0, w.comm));
  Dataspace scalar(ST_CHECK_HDF5(H5Screate(H5S_SCALAR)));
  w.write_attribute(key, H5T_STD_I64LE, H5T_NATIVE_INT64, scalar.get(), &value);
}

void CheckpointWriter::set_attribute(const std::string& key, double value) {
  Impl& w = *impl_;
  w.check_open("set_attribute");
  ST_CHECK_MPI(MPI_Bcast(&value, 1, MPI_DOUBLE, 0, w.comm));
  Dataspace scalar(ST_CHECK_HDF5(H5Screate(H5S_SCALAR)));
  w.write_attribute(key, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, scalar.get(), &value);
}

void CheckpointWriter::set_attribute(const std::string& key, const std::string& value) {
  Impl& w = *impl_;
  w.check_open("set_attribute");
  std::string text = broadcast_string(value, w.comm);
  if (text.find('\0') != std::string::npos)
    throw Error(w.final_path + ": string attribute '" + key + "' contains a NUL byte; store it as bytes");
  // Variable-length UTF-8: h5py returns it as str, and an empty string is fine.
  Datatype type(ST_CHECK_HDF5(H5Tcopy(H5T_C_S1)));
  ST_CHECK_HDF5(H5Tset_size(type.get(), H5T_VARIABLE));
  ST_CHECK_HDF5(H5Tset_cset(type.get(), H5T_CSET_UTF8));
  Dataspace scalar(ST_CHECK_HDF5(H5Screate(H5S_SCALAR)));
  const char* pointer = text.c_str();
  w.write_attribute(key, type.get(), type.get(), scalar.get(), &pointer);
}

void CheckpointWriter::set_attribute(const std::string& key, const std::vector<uint8_t>& bytes) {
  Impl& w = *impl_;
  w.check_open("set_attribute");
  std::string text = broadcast_string(std::string(bytes.begin(), bytes.end()), w.comm);
  hsize_t length = text.size();
  Dataspace space(ST_CHECK_HDF5(H5Screate_simple(1, &length, nullptr)));
  w.write_attribute(key, H5T_STD_U8LE, H5T_NATIVE_UINT8, space.get(), text.data());
}

void CheckpointWriter::commit() {
  Impl& w = *impl_;
  w.check_open("commit");
  ST_CHECK_HDF5(H5Fflush(w.file.get(), H5F_SCOPE_GLOBAL));
  w.file.close();
  ST_CHECK_MPI(MPI_Barrier(w.comm));
  std::string problem;
  if (w.rank == 0) {
    // Data must be on disk before the name says "complete".
    int fd = open(w.temporary_path.c_str(), O_RDONLY);
    if (fd < 0 || fsync(fd) != 0) problem = "cannot fsync " + w.temporary_path + ": " + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    if (problem.empty() && std::rename(w.temporary_path.c_str(), w.final_path.c_str()) != 0)
      problem = "cannot rename " + w.temporary_path + " to " + w.final_path + ": " + std::strerror(errno);
    if (problem.empty()) {
      int directory = open(file_directory(w.final_path).c_str(), O_RDONLY | O_DIRECTORY);
      if (directory >= 0) {
        fsync(directory);
        ::close(directory);
      }
    }
  }
  problem = broadcast_string(problem, w.comm);  // also the closing barrier
  if (!problem.empty()) throw Error(problem);
  w.committed = true;
}

// ---- reader ----------------------------------------------------------------------

struct CheckpointReader::Impl {
  std::string path;
  MPI_Comm comm = MPI_COMM_NULL;
  File file;

  Dataset open_dataset(const std::string& group, const std::string& name) const {
    const std::string full = join_group(group, name);
    {
      QuietHdf5Errors quiet;
      if (!link_exists(file.get(), full))
        throw Error(path + ": dataset " + full + " does not exist in the checkpoint");
    }
    return Dataset(ST_CHECK_HDF5(H5Dopen2(file.get(), full.c_str(), H5P_DEFAULT)));
  }
  std::vector<int64_t> dataset_shape(hid_t dataset) const {
    Dataspace space(ST_CHECK_HDF5(H5Dget_space(dataset)));
    int ndim = ST_CHECK_HDF5(H5Sget_simple_extent_ndims(space.get()));
    std::vector<hsize_t> dims(static_cast<size_t>(ndim));
    if (ndim > 0) ST_CHECK_HDF5(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr));
    return std::vector<int64_t>(dims.begin(), dims.end());
  }
  int dataset_dtype(hid_t dataset, const std::string& full) const {
    Datatype type(ST_CHECK_HDF5(H5Dget_type(dataset)));
    int code = dtype_code_of_file_type(type.get());
    if (code < 0) throw Error(path + ": dataset " + full + " has a type shardtrain cannot read");
    return code;
  }
  Attribute open_attribute(const std::string& key) const {
    if (!ST_CHECK_HDF5(H5Aexists(file.get(), key.c_str())))
      throw Error(path + ": checkpoint has no attribute '" + key + "'");
    return Attribute(ST_CHECK_HDF5(H5Aopen(file.get(), key.c_str(), H5P_DEFAULT)));
  }
  [[noreturn]] void wrong_kind(const std::string& key, const char* wanted) const {
    throw Error(path + ": attribute '" + key + "' is not " + wanted);
  }
};

CheckpointReader::CheckpointReader(const std::string& path, MPI_Comm comm) : impl_(std::make_unique<Impl>()) {
  Impl& r = *impl_;
  r.path = path;
  r.comm = comm;
  std::string problem;
  if (rank_of(comm) == 0) {
    struct stat info {};
    if (stat(path.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) {
      problem = "checkpoint " + path + " does not exist";
    } else {
      QuietHdf5Errors quiet;
      if (H5Fis_hdf5(path.c_str()) <= 0) problem = path + " is not an HDF5 file (not a shardtrain checkpoint)";
    }
  }
  problem = broadcast_string(problem, comm);
  if (!problem.empty()) throw Error(problem);

  PropertyList fapl(ST_CHECK_HDF5(H5Pcreate(H5P_FILE_ACCESS)));
  ST_CHECK_HDF5(H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL));
  r.file = File(ST_CHECK_HDF5(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get())));
  if (!has_attribute(kFormatAttribute))
    throw Error(path + " is an HDF5 file but not a shardtrain checkpoint (no '" + kFormatAttribute +
                "' attribute)");
  int64_t version = int_attribute(kFormatAttribute);
  if (version != kFormatVersion)
    throw Error(path + ": checkpoint format version " + std::to_string(version) + ", this build reads version " +
                std::to_string(kFormatVersion));
}

CheckpointReader::~CheckpointReader() = default;

const std::string& CheckpointReader::path() const { return impl_->path; }

std::vector<std::string> CheckpointReader::names(const std::string& group) const {
  const Impl& r = *impl_;
  check_group_name(group);
  {
    QuietHdf5Errors quiet;
    if (!link_exists(r.file.get(), "/" + group))
      throw Error(r.path + ": group /" + group + " does not exist in the checkpoint");
  }
  Group group_id(ST_CHECK_HDF5(H5Gopen2(r.file.get(), group.c_str(), H5P_DEFAULT)));
  std::vector<std::string> out;
  auto collect = [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
    static_cast<std::vector<std::string>*>(data)->emplace_back(name);
    return 0;
  };
  ST_CHECK_HDF5(H5Literate(group_id.get(), H5_INDEX_NAME, H5_ITER_INC, nullptr, collect, &out));
  return out;
}

bool CheckpointReader::has(const std::string& group, const std::string& name) const {
  QuietHdf5Errors quiet;
  return link_exists(impl_->file.get(), join_group(group, name));
}

std::vector<int64_t> CheckpointReader::shape(const std::string& group, const std::string& name) const {
  Dataset dataset = impl_->open_dataset(group, name);
  return impl_->dataset_shape(dataset.get());
}

at::ScalarType CheckpointReader::dtype(const std::string& group, const std::string& name) const {
  Dataset dataset = impl_->open_dataset(group, name);
  return dtype_table()[impl_->dataset_dtype(dataset.get(), join_group(group, name))].scalar_type;
}

void CheckpointReader::read(const std::string& group, std::vector<TensorSlice>& slices) {
  Impl& r = *impl_;
  check_group_name(group);
  const std::string where = r.path + ": /" + group;
  const int rank = rank_of(r.comm);
  std::vector<SliceRecord> mine;
  for (const auto& slice : slices) {
    if (!slice.data.defined()) throw Error(where + "/" + slice.name + ": slice has no data tensor to fill");
    SliceRecord record;
    record.rank = rank;
    record.name = slice.name;
    record.dtype = dtype_code(slice.data.scalar_type(), where + "/" + slice.name);
    record.shape = slice.shape;
    record.begin = slice.begin;
    record.count = slice.data.numel();
    mine.push_back(std::move(record));
  }
  std::map<std::string, TensorPlan> plans =
      plan_group(exchange_records(mine, r.comm), where, /*require_exact_cover=*/false);

  // Validate everything first: every rank checks the same union of requests,
  // so an Error is thrown on all ranks before any collective read starts.
  const auto& table = dtype_table();
  std::vector<Dataset> datasets;
  for (const auto& [name, plan] : plans) {
    const std::string full = join_group(group, name);
    Dataset dataset = r.open_dataset(group, name);
    std::vector<int64_t> file_shape = r.dataset_shape(dataset.get());
    int file_dtype = r.dataset_dtype(dataset.get(), full);
    if (file_shape != plan.shape || file_dtype != plan.dtype)
      throw Error(r.path + ": dataset " + full + " is " + table[file_dtype].name + " " + shape_string(file_shape) +
                  " in the checkpoint but " + table[plan.dtype].name + " " + shape_string(plan.shape) +
                  " was expected");
    datasets.push_back(std::move(dataset));
  }

  std::map<std::string, std::vector<size_t>> my_slices_by_name;
  for (size_t i = 0; i < slices.size(); ++i) my_slices_by_name[slices[i].name].push_back(i);
  PropertyList dxpl = collective_transfer();
  size_t index = 0;
  for (const auto& [name, plan] : plans) {
    Dataset& dataset = datasets[index++];
    if (numel_of(plan.shape) == 0) continue;
    std::vector<size_t> order = my_slices_by_name[name];
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return slices[a].begin < slices[b].begin; });
    std::vector<std::pair<int64_t, int64_t>> ranges;
    int64_t total = 0;
    for (size_t i : order) {
      ranges.emplace_back(slices[i].begin, slices[i].data.numel());
      total += slices[i].data.numel();
    }
    // Read straight into the caller's tensor when it is one CPU contiguous
    // slice; otherwise through a staging buffer.
    at::Tensor direct;
    if (order.size() == 1) {
      const at::Tensor& data = slices[order[0]].data;
      if (data.device().is_cpu() && data.is_contiguous()) direct = data;
    }
    at::Tensor buffer = direct.defined() || total == 0
                            ? direct
                            : at::empty({total}, at::TensorOptions().dtype(table[plan.dtype].scalar_type));
    transfer(/*writing=*/false, dataset.get(), plan, ranges, buffer.defined() ? buffer.data_ptr() : nullptr,
             dxpl.get());
    if (!direct.defined() && total > 0) {
      int64_t offset = 0;
      for (size_t i : order) {
        at::Tensor& data = slices[i].data;
        data.copy_(buffer.narrow(0, offset, data.numel()).view(data.sizes()));
        offset += data.numel();
      }
    }
  }
}

at::Tensor CheckpointReader::read_tensor(const std::string& group, const std::string& name) const {
  const Impl& r = *impl_;
  Dataset dataset = r.open_dataset(group, name);
  std::vector<int64_t> shape = r.dataset_shape(dataset.get());
  const DtypeInfo& info = dtype_table()[r.dataset_dtype(dataset.get(), join_group(group, name))];
  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(info.scalar_type));
  if (out.numel() > 0)
    ST_CHECK_HDF5(H5Dread(dataset.get(), info.memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data_ptr()));
  return out;
}

bool CheckpointReader::has_attribute(const std::string& key) const {
  return ST_CHECK_HDF5(H5Aexists(impl_->file.get(), key.c_str())) > 0;
}

std::vector<std::string> CheckpointReader::attribute_names() const {
  std::vector<std::string> out;
  auto collect = [](hid_t, const char* name, const H5A_info_t*, void* data) -> herr_t {
    static_cast<std::vector<std::string>*>(data)->emplace_back(name);
    return 0;
  };
  ST_CHECK_HDF5(H5Aiterate2(impl_->file.get(), H5_INDEX_NAME, H5_ITER_INC, nullptr, collect, &out));
  return out;
}

int64_t CheckpointReader::int_attribute(const std::string& key) const {
  Attribute attribute = impl_->open_attribute(key);
  Datatype type(ST_CHECK_HDF5(H5Aget_type(attribute.get())));
  Dataspace space(ST_CHECK_HDF5(H5Aget_space(attribute.get())));
  if (H5Tget_class(type.get()) != H5T_INTEGER || H5Sget_simple_extent_npoints(space.get()) != 1)
    impl_->wrong_kind(key, "an integer");
  int64_t value = 0;
  ST_CHECK_HDF5(H5Aread(attribute.get(), H5T_NATIVE_INT64, &value));
  return value;
}

double CheckpointReader::double_attribute(const std::string& key) const {
  Attribute attribute = impl_->open_attribute(key);
  Datatype type(ST_CHECK_HDF5(H5Aget_type(attribute.get())));
  Dataspace space(ST_CHECK_HDF5(H5Aget_space(attribute.get())));
  if (H5Tget_class(type.get()) != H5T_FLOAT || H5Sget_simple_extent_npoints(space.get()) != 1)
    impl_->wrong_kind(key, "a floating-point number");
  double value = 0;
  ST_CHECK_HDF5(H5Aread(attribute.get(), H5T_NATIVE_DOUBLE, &value));
  return value;
}

std::string CheckpointReader::string_attribute(const std::string& key) const {
  Attribute attribute = impl_->open_attribute(key);
  Datatype type(ST_CHECK_HDF5(H5Aget_type(attribute.get())));
  if (H5Tget_class(type.get()) != H5T_STRING) impl_->wrong_kind(key, "a string");
  if (ST_CHECK_HDF5(H5Tis_variable_str(type.get()))) {
    Datatype memory_type(ST_CHECK_HDF5(H5Tcopy(H5T_C_S1)));
    ST_CHECK_HDF5(H5Tset_size(memory_type.get(), H5T_VARIABLE));
    ST_CHECK_HDF5(H5Tset_cset(memory_type.get(), H5Tget_cset(type.get())));
    char* pointer = nullptr;
    ST_CHECK_HDF5(H5Aread(attribute.get(), memory_type.get(), &pointer));
    std::string value = pointer ? pointer : "";
    H5free_memory(pointer);
    return value;
  }
  // Fixed-length strings (e.g. written by other tools): size bytes, NUL padded.
  size_t size = H5Tget_size(type.get());
  std::string value(size, '\0');
  ST_CHECK_HDF5(H5Aread(attribute.get(), type.get(), value.data()));
  value.resize(std::strlen(value.c_str()));
  return value;
}

std::vector<uint8_t> CheckpointReader::bytes_attribute(const std::string& key) const {
  Attribute attribute = impl_->open_attribute(key);
  Datatype type(ST_CHECK_HDF5(H5Aget_type(attribute.get())));
  Dataspace space(ST_CHECK_HDF5(H5Aget_space(attribute.get())));
  if (H5Tget_class(type.get()) != H5T_INTEGER || H5Tget_size(type.get()) != 1 ||
      H5Sget_simple_extent_ndims(space.get()) != 1)
    impl_->wrong_kind(key, "bytes (a 1-D uint8 array)");
  std::vector<uint8_t> value(static_cast<size_t>(H5Sget_simple_extent_npoints(space.get())));
  if (!value.empty()) ST_CHECK_HDF5(H5Aread(attribute.get(), H5T_NATIVE_UINT8, value.data()));
  return value;
}

}  // namespace shardtrain
