// Pure on purpose (checkpoint/checkpoint_format.h): no MPI, HDF5 or torch
// include belongs here.
#include "checkpoint/checkpoint_format.h"

#include <cstring>

#include "shardtrain/core/check.h"

namespace shardtrain {
namespace detail {
namespace {

template <class T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

// Takes values from the front of a byte string; Error when one runs past its end.
class ByteReader {
 public:
  ByteReader(const std::string& bytes, int rank) : bytes_(bytes), rank_(rank) {}
  template <class T>
  T take() {
    need(sizeof(T));
    T value;
    std::memcpy(&value, bytes_.data() + position_, sizeof(T));
    position_ += sizeof(T);
    return value;
  }
  // A length (or count of `unit_bytes` items) that must fit in what is left.
  size_t take_length(size_t unit_bytes) {
    const auto length = take<int64_t>();
    if (length < 0 || static_cast<uint64_t>(length) > remaining() / unit_bytes) malformed();
    return static_cast<size_t>(length);
  }
  std::string take_text(size_t length) {
    need(length);
    std::string text = bytes_.substr(position_, length);
    position_ += length;
    return text;
  }
  size_t remaining() const { return bytes_.size() - position_; }
  [[noreturn]] void malformed() const {
    throw Error("checkpoint: the slice records of rank " + std::to_string(rank_) + " are malformed (" +
                std::to_string(bytes_.size()) + " bytes)");
  }

 private:
  void need(size_t length) const {
    if (length > remaining()) malformed();
  }
  const std::string& bytes_;
  int rank_;
  size_t position_ = 0;
};

}  // namespace

std::string join_group(const std::string& group, const std::string& name) { return "/" + group + "/" + name; }

void check_group_name(const std::string& group) {
  if (group.empty() || group.front() == '/' || group.back() == '/' || group.find("//") != std::string::npos)
    throw Error("checkpoint group name '" + group + "' must be a relative path like 'model' or 'optim/exp_avg'");
}

void check_format_version(const std::string& path, int64_t version) {
  if (version != kFormatVersion)
    throw Error(path + ": checkpoint format version " + std::to_string(version) + ", this build reads version " +
                std::to_string(kFormatVersion));
}

void check_checksum_algorithm(const std::string& path, const std::string& algorithm) {
  if (algorithm != kChecksumAlgorithm)
    throw Error(path + ": checksums of kind '" + algorithm + "', this build knows '" + kChecksumAlgorithm + "'");
}

bool holds(AttributeKind kind, const AttributeShape& shape) {
  switch (kind) {
    case AttributeKind::kInteger: return shape.type_class == TypeClass::kInteger && shape.num_elements == 1;
    case AttributeKind::kFloat: return shape.type_class == TypeClass::kFloat && shape.num_elements == 1;
    case AttributeKind::kString: return shape.type_class == TypeClass::kString;
    case AttributeKind::kBytes:
      return shape.type_class == TypeClass::kInteger && shape.type_size_bytes == 1 && shape.num_dimensions == 1;
  }
  return false;
}

const char* kind_description(AttributeKind kind) {
  switch (kind) {
    case AttributeKind::kInteger: return "an integer";
    case AttributeKind::kFloat: return "a floating-point number";
    case AttributeKind::kString: return "a string";
    case AttributeKind::kBytes: return "bytes (a 1-D uint8 array)";
  }
  return "?";
}

std::string text_of_fixed_length_string(std::string bytes) {
  const size_t nul = bytes.find('\0');
  if (nul != std::string::npos) bytes.resize(nul);
  return bytes;
}

std::string encode_slice_records(const std::vector<SliceRecord>& records) {
  std::string bytes;
  put<int64_t>(bytes, static_cast<int64_t>(records.size()));
  for (const auto& r : records) {
    put<int64_t>(bytes, static_cast<int64_t>(r.name.size()));
    bytes += r.name;
    put<int32_t>(bytes, r.dtype);
    put<int64_t>(bytes, static_cast<int64_t>(r.shape.size()));
    for (int64_t d : r.shape) put<int64_t>(bytes, d);
    put<int64_t>(bytes, r.begin);
    put<int64_t>(bytes, r.count);
  }
  return bytes;
}

std::vector<SliceRecord> decode_slice_records(const std::string& bytes, int rank) {
  ByteReader in(bytes, rank);
  // The smallest record: a name length, a dtype, a rank, begin and count.
  constexpr size_t kMinRecordBytes = 8 + 4 + 8 + 8 + 8;
  const size_t num_records = in.take_length(kMinRecordBytes);
  std::vector<SliceRecord> records;
  for (size_t i = 0; i < num_records; ++i) {
    SliceRecord r;
    r.rank = rank;
    r.name = in.take_text(in.take_length(1));
    r.dtype = in.take<int32_t>();
    const size_t ndim = in.take_length(sizeof(int64_t));
    for (size_t d = 0; d < ndim; ++d) r.shape.push_back(in.take<int64_t>());
    r.begin = in.take<int64_t>();
    r.count = in.take<int64_t>();
    records.push_back(std::move(r));
  }
  if (in.remaining() != 0) in.malformed();
  return records;
}

}  // namespace detail
}  // namespace shardtrain
