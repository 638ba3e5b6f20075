// Private to src/checkpoint: what the names and bytes that describe a
// checkpoint mean, as pure functions over values, strings and byte buffers (no
// MPI, no HDF5, no torch), so that a hostile file's metadata can be parsed,
// and fuzzed, in one process without either. The I/O around them fetches the
// raw values: checkpoint_reader.cpp and verify.cpp from the file,
// slice_plan.cpp from the other ranks.
//
//   detail::check_format_version(path, stored_version);   // Error unless this build reads it
//   detail::AttributeShape shape;                           // as HDF5 describes the attribute
//   shape.type_class = detail::TypeClass::kInteger;
//   shape.num_elements = 1;
//   if (!detail::holds(detail::AttributeKind::kInteger, shape)) ...
//   std::vector<SliceRecord> records = detail::decode_slice_records(bytes, rank);
//   std::map<std::string, TensorPlan> plans = detail::plan_group(records, "/model", true);
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "shardtrain/core/text.h"

namespace shardtrain {
namespace detail {

// ---- names and versions in the file ------------------------------------------

constexpr int64_t kFormatVersion = 1;
constexpr const char* kFormatAttribute = "shardtrain_format_version";
constexpr const char* kWorldSizeAttribute = "writer_world_size";
// Checksums came after format version 1 without changing the layout: a file
// that has this root attribute has a checksum attribute on every dataset.
constexpr const char* kChecksumAlgorithmAttribute = "shardtrain_checksum_algorithm";
constexpr const char* kChecksumAlgorithm = "sum-mix64-v1";
constexpr const char* kChecksumAttribute = "shardtrain_checksum";
// Root attributes got checksums later still: a file that has this root
// attribute (a string, encode_attribute_checksums()) lists every other root
// attribute with its kind and checksum. Files without it still load.
constexpr const char* kAttributeChecksumsAttribute = "shardtrain_attribute_checksums";

// The checksums' mixing: SplitMix64's finaliser (a bijection) and 2^64 / phi.
constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;
inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// The dataset path "/<group>/<name>".
std::string join_group(const std::string& group, const std::string& name);

// Error unless `group` is a relative path like "model" or "optim/exp_avg".
void check_group_name(const std::string& group);

// Error naming the file `path` unless this build reads checkpoints of `version`.
void check_format_version(const std::string& path, int64_t version);

// Error naming the file unless its checksums are of the kind this build computes.
void check_checksum_algorithm(const std::string& path, const std::string& algorithm);

// ---- root attributes -----------------------------------------------------------

// What CheckpointReader's int_attribute(), double_attribute(),
// string_attribute() and bytes_attribute() return.
enum class AttributeKind { kInteger, kFloat, kString, kBytes };

// An attribute's HDF5 type class, as far as the kinds tell them apart.
enum class TypeClass { kInteger, kFloat, kString, kOther };

// How the file describes an attribute. The reader fills in what the wanted
// kind looks at: the type always, the dataspace for every kind but kString.
struct AttributeShape {
  TypeClass type_class = TypeClass::kOther;
  size_t type_size_bytes = 0;
  int num_dimensions = -1;
  int64_t num_elements = -1;
};

// Whether an attribute of `shape` holds a value of `kind`: one integer, one
// floating-point number, a string of any length, or a 1-D array of 1-byte
// integers.
bool holds(AttributeKind kind, const AttributeShape& shape);

// `kind` in "attribute 'step' is not <an integer>" messages.
const char* kind_description(AttributeKind kind);

// The text of a fixed-length string attribute (as other tools write them):
// its bytes up to the first NUL.
std::string text_of_fixed_length_string(std::string bytes);

// An attribute's value as bytes: an integer or a float as its 8 bytes (int64,
// IEEE double, native order), a string as its text, bytes as they are.
// The checksum of an attribute of `kind` with that value, as datasets are
// summed ("sum-mix64-v1"): the sum of mix64(byte_i + (i + 1) phi) over its
// bytes, plus a term of the kind and the length. One changed bit, a moved
// byte, another length or another kind change it.
uint64_t attribute_checksum(AttributeKind kind, const std::string& value_bytes);

struct AttributeChecksum {
  AttributeKind kind = AttributeKind::kInteger;
  uint64_t checksum = 0;
};

// The checksum table as stored: one line per attribute, sorted by name,
// "<kind> <16 hex digits> <name>" with kind int, float, string or bytes.
// Error for a name with a line break (never written).
std::string encode_attribute_checksums(const std::map<std::string, AttributeChecksum>& table);
// The table back. Error naming `path` for anything encode_attribute_checksums()
// does not write (a hostile or damaged table).
std::map<std::string, AttributeChecksum> decode_attribute_checksums(const std::string& text, const std::string& path);

// ---- element types and shapes ------------------------------------------------

// Dtype codes are 0 .. kNumDtypes - 1: float32, float64, int32, int64
// (checkpoint/dtypes.h maps them to ATen and HDF5 types in this order).
constexpr int kNumDtypes = 4;
// "float32" for code 0, ...; Error for a code outside [0, kNumDtypes).
const char* dtype_name(int code);

// The number of elements of `shape` (1 for a scalar). Error for a negative
// dimension or a product above INT64_MAX (a hostile shape must not wrap).
int64_t numel_of(const std::vector<int64_t>& shape);

// ---- slice records, between ranks ---------------------------------------------

// A rank's contribution to one group, as seen by every rank after the exchange.
struct SliceRecord {
  int rank = 0;
  std::string name;
  int dtype = 0;  // a code of checkpoint/dtypes.h
  std::vector<int64_t> shape;
  int64_t begin = 0, count = 0;
};

// One rank's records as bytes (native byte order: they only travel between the
// ranks of one job). The `rank` fields are not sent.
std::string encode_slice_records(const std::vector<SliceRecord>& records);

// The records encode_slice_records() wrote on `rank`. Error when `bytes` are
// cut short or run on (never for bytes encode_slice_records() wrote). Dtype
// codes, shapes and ranges are taken as sent: plan_group() judges them.
std::vector<SliceRecord> decode_slice_records(const std::string& bytes, int rank);

// One tensor of a group: its agreed shape and dtype, and every rank's ranges.
struct TensorPlan {
  std::vector<int64_t> shape;
  int dtype = 0;
  std::vector<SliceRecord> records;
};

// Groups the records by tensor name (sorted, so every rank visits datasets in
// the same order) and checks what can be checked without the file: every dtype
// code is one of kNumDtypes, the ranks agree on each tensor's shape and dtype,
// every slice lies inside its tensor, and either the slices cover each tensor
// exactly once (require_exact_cover: a write) or no rank's own slices of a
// tensor overlap (a read). `where` names the group for messages.
std::map<std::string, TensorPlan> plan_group(const std::vector<SliceRecord>& records, const std::string& where,
                                             bool require_exact_cover);

// The flat ranges of [0, numel) that `records` do not cover, as (begin, count), sorted.
std::vector<std::pair<int64_t, int64_t>> uncovered(const std::vector<SliceRecord>& records, int64_t numel);

// The parts of [begin, begin + count) that no record of a rank below `rank`
// covers: the elements whose checksum terms `rank` adds, so that each element
// of a dataset read by several ranks is counted once. Sorted (begin, count).
std::vector<std::pair<int64_t, int64_t>> first_claims(const std::vector<SliceRecord>& records, int rank,
                                                      int64_t begin, int64_t count);

}  // namespace detail
}  // namespace shardtrain
