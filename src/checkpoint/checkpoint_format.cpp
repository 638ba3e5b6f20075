// Pure on purpose (checkpoint/checkpoint_format.h): no MPI, HDF5 or torch
// include belongs here.
#include "checkpoint/checkpoint_format.h"

#include <algorithm>
#include <cstdio>
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

// begin + count for messages, or "beyond 2^63" where the sum would overflow.
std::string range_end_text(int64_t begin, int64_t count) {
  int64_t end = 0;
  return __builtin_add_overflow(begin, count, &end) ? std::string("beyond 2^63") : std::to_string(end);
}

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

namespace {

constexpr const char* kKindNames[] = {"int", "float", "string", "bytes"};

}  // namespace

uint64_t attribute_checksum(AttributeKind kind, const std::string& value_bytes) {
  const auto code = static_cast<uint64_t>(kind);
  uint64_t sum = mix64(~(code * kGolden) ^ static_cast<uint64_t>(value_bytes.size()));
  uint64_t offset = kGolden;
  for (const char c : value_bytes) {
    sum += mix64(static_cast<uint64_t>(static_cast<unsigned char>(c)) + offset);
    offset += kGolden;
  }
  return sum;
}

std::string encode_attribute_checksums(const std::map<std::string, AttributeChecksum>& table) {
  std::string out;
  char hex[17];
  for (const auto& [name, entry] : table) {
    if (name.empty() || name.find_first_of("\n\r") != std::string::npos)
      throw Error("checkpoint attribute name '" + name + "' must be non-empty and on one line");
    std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(entry.checksum));
    out += std::string(kKindNames[static_cast<int>(entry.kind)]) + " " + hex + " " + name + "\n";
  }
  return out;
}

std::map<std::string, AttributeChecksum> decode_attribute_checksums(const std::string& text, const std::string& path) {
  std::map<std::string, AttributeChecksum> table;
  size_t start = 0, line_number = 0;
  while (start < text.size()) {
    ++line_number;
    const size_t end = text.find('\n', start);
    const std::string line = text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    start = end == std::string::npos ? text.size() : end + 1;
    auto malformed = [&](const char* why) {
      throw Error(path + ": attribute " + kAttributeChecksumsAttribute + " is damaged (line " +
                  std::to_string(line_number) + ": " + why + "); use another checkpoint");
    };
    if (end == std::string::npos) malformed("no line end");
    const size_t space = line.find(' ');
    if (space == std::string::npos) malformed("no kind");
    const std::string kind = line.substr(0, space);
    AttributeChecksum entry;
    bool known = false;
    for (int k = 0; k < 4; ++k)
      if (kind == kKindNames[k]) {
        entry.kind = static_cast<AttributeKind>(k);
        known = true;
      }
    if (!known) malformed("unknown kind");
    if (line.size() < space + 1 + 16 + 2 || line[space + 17] != ' ') malformed("no checksum");
    for (size_t i = space + 1; i < space + 17; ++i) {
      const char c = line[i];
      const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (digit < 0) malformed("the checksum is not 16 hex digits");
      entry.checksum = entry.checksum << 4 | static_cast<uint64_t>(digit);
    }
    const std::string name = line.substr(space + 18);
    if (name.empty() || name.find('\r') != std::string::npos) malformed("no name");
    if (!table.emplace(name, entry).second) malformed("a name listed twice");
  }
  return table;
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

const char* dtype_name(int code) {
  static const char* const kNames[kNumDtypes] = {"float32", "float64", "int32", "int64"};
  if (code < 0 || code >= kNumDtypes)
    throw Error("checkpoint: dtype code " + std::to_string(code) + " is not one of 0 to " +
                std::to_string(kNumDtypes - 1));
  return kNames[code];
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw Error("checkpoint: shape " + shape_text(shape) + " has a negative dimension");
    if (__builtin_mul_overflow(n, d, &n))
      throw Error("checkpoint: shape " + shape_text(shape) + " has more than 2^63 elements");
  }
  return n;
}

std::map<std::string, TensorPlan> plan_group(const std::vector<SliceRecord>& records, const std::string& where,
                                             bool require_exact_cover) {
  std::map<std::string, TensorPlan> plans;
  for (const auto& r : records) {
    if (r.dtype < 0 || r.dtype >= kNumDtypes)
      throw Error(where + "/" + r.name + ": rank " + std::to_string(r.rank) + " sent dtype code " +
                  std::to_string(r.dtype) + " (known: 0 to " + std::to_string(kNumDtypes - 1) + ")");
    auto found = plans.find(r.name);
    if (found == plans.end()) {
      plans[r.name] = TensorPlan{r.shape, r.dtype, {r}};
      continue;
    }
    TensorPlan& plan = found->second;
    const SliceRecord& first = plan.records.front();
    if (plan.shape != r.shape || plan.dtype != r.dtype)
      throw Error(where + "/" + r.name + ": ranks disagree on the tensor: rank " + std::to_string(first.rank) +
                  " has " + dtype_name(first.dtype) + " " + shape_text(first.shape) + ", rank " +
                  std::to_string(r.rank) + " has " + dtype_name(r.dtype) + " " + shape_text(r.shape));
    plan.records.push_back(r);
  }
  for (auto& [name, plan] : plans) {
    const int64_t numel = numel_of(plan.shape);
    for (const auto& r : plan.records) {
      // count > numel - begin, not begin + count > numel: hostile values must not overflow.
      if (r.begin < 0 || r.count < 0 || r.begin > numel || r.count > numel - r.begin)
        throw Error(where + "/" + name + ": rank " + std::to_string(r.rank) + "'s slice [" +
                    std::to_string(r.begin) + ", " + range_end_text(r.begin, r.count) +
                    ") is outside the tensor's " + std::to_string(numel) + " elements (shape " +
                    shape_text(plan.shape) + ")");
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

std::vector<std::pair<int64_t, int64_t>> uncovered(const std::vector<SliceRecord>& records, int64_t numel) {
  std::vector<std::pair<int64_t, int64_t>> covered;
  for (const auto& r : records)
    if (r.count > 0) covered.emplace_back(r.begin, r.begin + r.count);
  std::sort(covered.begin(), covered.end());
  std::vector<std::pair<int64_t, int64_t>> gaps;
  int64_t next = 0;
  for (const auto& [begin, end] : covered) {
    if (begin > next) gaps.emplace_back(next, begin - next);
    next = std::max(next, end);
  }
  if (next < numel) gaps.emplace_back(next, numel - next);
  return gaps;
}

std::vector<std::pair<int64_t, int64_t>> first_claims(const std::vector<SliceRecord>& records, int rank,
                                                      int64_t begin, int64_t count) {
  std::vector<std::pair<int64_t, int64_t>> lower;
  for (const auto& r : records)
    if (r.rank < rank && r.count > 0) lower.emplace_back(r.begin, r.begin + r.count);
  std::sort(lower.begin(), lower.end());
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t position = begin;
  const int64_t end = begin + count;
  for (const auto& [b, e] : lower) {
    if (e <= position) continue;
    if (b >= end) break;
    if (b > position) out.emplace_back(position, b - position);
    position = std::max(position, e);
    if (position >= end) break;
  }
  if (position < end) out.emplace_back(position, end - position);
  return out;
}

}  // namespace detail
}  // namespace shardtrain
