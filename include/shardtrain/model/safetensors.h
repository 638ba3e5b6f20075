// Reading and writing safetensors files as at::Tensor (format: safetensors_format.h).
//
//   SafetensorsFile file("model.safetensors");        // mmap + full validation
//   for (const auto& entry : file.entries()) ...       // name, dtype, shape
//   at::Tensor w = file.tensor("classifier.weight");   // CPU copy, the file's dtype
//
//   write_safetensors("out.safetensors", {{"a", a}, {"b", b}});
//
// Sharded checkpoints ("model.safetensors.index.json" with a "weight_map" of
// tensor name -> shard file) are read by read_safetensors_index().
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "shardtrain/model/safetensors_format.h"

namespace shardtrain {

// Tensors in a fixed order: (name, tensor). The model's state dict has this type.
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// A read-only, memory-mapped safetensors file, validated when opened: a
// malformed, truncated or hostile file throws shardtrain::Error naming the path
// and the problem; afterwards every access stays inside the mapping.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // Entries in data order.
  const std::vector<SafetensorsEntry>& entries() const { return header_.entries; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  bool contains(const std::string& name) const;
  // The entry for `name`; throws shardtrain::Error if the file has none.
  const SafetensorsEntry& entry(const std::string& name) const;
  // A fresh contiguous CPU tensor holding a copy of `name` in the file's dtype.
  // BOOL tensors whose bytes are not 0/1 throw shardtrain::Error.
  at::Tensor tensor(const std::string& name) const;
  // Every tensor, in data order.
  NamedTensors all_tensors() const;

 private:
  std::string path_;
  const uint8_t* bytes_ = nullptr;  // the mapping (nullptr for an empty file)
  std::size_t size_ = 0;
  SafetensorsHeader header_;
  std::map<std::string, std::size_t> index_;  // name -> position in header_.entries
};

// The safetensors dtype for a torch scalar type; throws shardtrain::Error for
// types safetensors/LibTorch cannot share (complex, quantized, ...).
SafetensorsDtype to_safetensors_dtype(at::ScalarType type);
at::ScalarType to_scalar_type(SafetensorsDtype dtype);

// Writes `tensors` (any device, any layout; copied to contiguous CPU) in the
// given order, with `metadata` as "__metadata__" (default {"format": "pt"},
// which HF transformers expects). The file appears atomically: the bytes go to
// "<path>.tmp" and are renamed over `path`. Same input -> same bytes.
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

// The "weight_map" of a sharded checkpoint index (model.safetensors.index.json):
// tensor name -> shard file name. Shard names must be plain file names in the
// index's folder (no '/', no ".."); anything else throws shardtrain::Error.
std::map<std::string, std::string> read_safetensors_index(const std::string& index_path);

}  // namespace shardtrain
