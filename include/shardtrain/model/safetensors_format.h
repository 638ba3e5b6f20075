// The safetensors container format, without any tensor library.
//
// A safetensors file is
//   [8 bytes: N, unsigned little-endian] [N bytes: JSON header] [data area]
// and the header maps each tensor name to its dtype, shape and byte range in the
// data area, plus an optional "__metadata__" object of string -> string:
//   {"__metadata__": {"format": "pt"},
//    "bert.pooler.dense.bias": {"dtype": "F32", "shape": [768], "data_offsets": [0, 3072]}, ...}
//
// parse_safetensors() validates a whole file image before anyone touches a data
// byte, following the reference implementation (huggingface/safetensors):
//   - the file holds at least 8 bytes, N <= kMaxHeaderBytes and 8 + N <= file size;
//   - the header is a UTF-8 JSON object nested at most 3 levels; entries are
//     objects with the keys dtype (a known name), shape (array of non-negative
//     integers whose product does not overflow) and data_offsets ([begin, end],
//     non-negative integers); other keys in an entry are ignored, as upstream;
//   - end - begin == numel * itemsize, and the byte ranges, sorted, tile the data
//     area exactly: no overlap, no gap, nothing after the last tensor;
//   - "__metadata__", if present, is an object whose values are strings.
// Any violation throws shardtrain::Error naming the source and the problem. This
// part has no torch dependency so that the fuzz target (tests/fuzz) can build it
// alone; safetensors.h adds the at::Tensor reader and writer on top.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace shardtrain {

// Element types this build reads and writes (names as in the header).
// U16/U32/U64 and the F8 types are valid safetensors but rejected with a clear
// message: LibTorch 1.13 has no matching scalar type.
enum class SafetensorsDtype { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL };

// "F32" for SafetensorsDtype::F32, etc.
const char* safetensors_dtype_name(SafetensorsDtype dtype);
// Bytes per element: 8 for F64/I64, 1 for U8/I8/BOOL, ...
std::size_t safetensors_dtype_size(SafetensorsDtype dtype);

// One tensor as the header describes it. Offsets are relative to the data area.
struct SafetensorsEntry {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::F32;
  std::vector<int64_t> shape;  // [] is a scalar (one element)
  uint64_t begin = 0;          // first byte
  uint64_t end = 0;            // one past the last byte
  uint64_t numel() const;
};

// A validated header. `entries` are in data order (sorted by begin, then name).
struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;
  std::map<std::string, std::string> metadata;  // "__metadata__"
  uint64_t data_start = 0;                      // 8 + N: file offset of the data area
  uint64_t data_bytes = 0;                      // size of the data area
};

// Largest header accepted (the reference implementation's limit).
constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// Parses and validates the image of a whole safetensors file (`size` bytes at
// `bytes`). `source` names the file in error messages. Reads nothing outside
// [bytes, bytes + size). Throws shardtrain::Error on any problem.
SafetensorsHeader parse_safetensors(const uint8_t* bytes, std::size_t size, const std::string& source);

// One tensor to serialise: its name, dtype, shape and raw little-endian bytes
// (`num_bytes` must equal numel * itemsize).
struct SafetensorsBlob {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  std::size_t num_bytes = 0;
};

// The bytes that precede the data area for `blobs` written in the given order:
// the 8-byte length, then the JSON header ("__metadata__" first, then tensors
// in order, compact), padded with spaces to a multiple of 8 bytes like the
// reference writer so the data area stays 8-byte aligned. Deterministic.
std::string serialize_safetensors_header(const std::vector<SafetensorsBlob>& blobs,
                                         const std::map<std::string, std::string>& metadata);

// The weight_map of a sharded checkpoint's model.safetensors.index.json
// (`text`; `source` names it in messages): tensor name -> shard file name in
// the same folder. Throws shardtrain::Error for bad JSON, no weight_map, or a
// shard that is not a plain file name. read_safetensors_index() reads the file.
std::map<std::string, std::string> parse_safetensors_index(const std::string& text, const std::string& source);

}  // namespace shardtrain
