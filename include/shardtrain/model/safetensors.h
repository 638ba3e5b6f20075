// Reading and writing safetensors files as at::Tensor (format: safetensors_format.h).
//
//   SafetensorsFile file("model.safetensors");        // mmap + full validation
//   for (const auto& entry : file.entries()) ...       // name, dtype, shape
//   at::Tensor w = file.tensor("classifier.weight");   // CPU copy, the file's dtype
//
//   write_safetensors("out.safetensors", {{"a", a}, {"b", b}});
//
//   // The same file, one tensor at a time (the header is known up front):
//   SafetensorsStreamWriter writer("out.safetensors", {{"a", at::kFloat, {2, 3}}, {"b", at::kHalf, {4}}});
//   writer.write_next("a", a);   // then a may be freed
//   writer.write_next("b", b);
//   writer.commit();        // only now does out.safetensors appear
//
// Sharded checkpoints ("model.safetensors.index.json" with a "weight_map" of
// tensor name -> shard file) are read by read_safetensors_index().
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "shardtrain/model/safetensors_format.h"

namespace shardtrain {

class OutputFile;

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
// "<path>.tmp" and are renamed over `path`. Same input -> same bytes. Holds a
// contiguous CPU copy of every tensor that is not one already, all at once;
// SafetensorsStreamWriter writes the same bytes holding one tensor at a time.
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

// What the header says about one tensor, before its data exists.
struct SafetensorsTensorSpec {
  std::string name;
  at::ScalarType dtype = at::kFloat;  // a type to_safetensors_dtype() accepts
  std::vector<int64_t> shape;         // {} is a scalar
};

// Writes a safetensors file tensor by tensor, so a caller never needs more
// than one tensor in memory: the constructor writes the whole header (names,
// dtypes, shapes and data offsets follow from `specs`), each write_next()
// appends the next tensor's bytes, commit() renames "<path>.tmp" over `path`.
// For the same tensors the file is byte-identical to write_safetensors().
//
// Misuse throws shardtrain::Error naming the file and the tensor: a spec with
// a duplicate name, the name "__metadata__", a negative dimension or an
// unstorable dtype (constructor); a tensor out of order (another name than
// the next spec's), undefined, of another dtype or shape than its spec, or one
// more than the specs list (write_next);
// commit() before every tensor is written. After any Error the writer is
// unusable (every later call throws) and its temporary file is removed; the
// destructor removes it too when commit() never ran, so `path` is untouched
// unless commit() succeeds.
class SafetensorsStreamWriter {
 public:
  // Elements converted per step by write_next_converting().
  static constexpr int64_t kConvertChunkElements = int64_t{1} << 18;

  SafetensorsStreamWriter(const std::string& path, std::vector<SafetensorsTensorSpec> specs,
                          const std::map<std::string, std::string>& metadata = {{"format", "pt"}});
  ~SafetensorsStreamWriter();
  SafetensorsStreamWriter(const SafetensorsStreamWriter&) = delete;
  SafetensorsStreamWriter& operator=(const SafetensorsStreamWriter&) = delete;

  // Appends the bytes of the next tensor, specs()[tensors_written()], which
  // must be called `name` and have its spec's dtype and shape; any device or
  // layout. Returns the bytes of the temporary copy it made (a contiguous CPU
  // copy, only when `tensor` is not one already; 0 otherwise).
  std::size_t write_next(const std::string& name, const at::Tensor& tensor);
  // The same for a tensor of another dtype (same shape), converted to the
  // spec's dtype kConvertChunkElements at a time, so at most one chunk of the
  // converted copy exists at once. Bytes as write_next(name, tensor.to(dtype)).
  // Returns the bytes of temporary copies it held at once (the chunk, plus a
  // contiguous CPU copy of `tensor` when it is not one already).
  std::size_t write_next_converting(const std::string& name, const at::Tensor& tensor);
  // Flushes, closes and moves the file into place (core/fs_util.h's
  // OutputFile: a temporary file renamed over `path`, a link followed). Every
  // spec must have been written.
  void commit();

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsTensorSpec>& specs() const { return specs_; }
  std::size_t tensors_written() const { return next_; }
  // Size of the file: header plus data bytes.
  uint64_t file_bytes() const { return file_bytes_; }

 private:
  const SafetensorsTensorSpec& check_next(const std::string& name, const at::Tensor& tensor, bool same_dtype);
  void append(const void* data, std::size_t num_bytes);
  [[noreturn]] void fail(const std::string& message);
  void discard();

  std::string path_;
  std::vector<SafetensorsTensorSpec> specs_;
  std::size_t next_ = 0;
  uint64_t file_bytes_ = 0;
  std::unique_ptr<OutputFile> out_;
  bool committed_ = false;
};

// The "weight_map" of a sharded checkpoint index (model.safetensors.index.json):
// tensor name -> shard file name. Shard names must be plain file names in the
// index's folder (no '/', no ".."); anything else throws shardtrain::Error.
std::map<std::string, std::string> read_safetensors_index(const std::string& index_path);

}  // namespace shardtrain
