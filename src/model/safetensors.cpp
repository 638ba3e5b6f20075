#include "shardtrain/model/safetensors.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"
#include "shardtrain/core/json_read.h"
#include "shardtrain/core/text.h"

namespace shardtrain {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian; so must the host be");

std::string errno_text() { return std::strerror(errno); }

struct FileDescriptor {
  int fd = -1;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

SafetensorsDtype to_safetensors_dtype(at::ScalarType type) {
  switch (type) {
    case at::kDouble: return SafetensorsDtype::F64;
    case at::kFloat: return SafetensorsDtype::F32;
    case at::kHalf: return SafetensorsDtype::F16;
    case at::kBFloat16: return SafetensorsDtype::BF16;
    case at::kLong: return SafetensorsDtype::I64;
    case at::kInt: return SafetensorsDtype::I32;
    case at::kShort: return SafetensorsDtype::I16;
    case at::kChar: return SafetensorsDtype::I8;
    case at::kByte: return SafetensorsDtype::U8;
    case at::kBool: return SafetensorsDtype::BOOL;
    default: throw Error(std::string("safetensors: cannot store tensors of type ") + c10::toString(type));
  }
}

at::ScalarType to_scalar_type(SafetensorsDtype dtype) {
  switch (dtype) {
    case SafetensorsDtype::F64: return at::kDouble;
    case SafetensorsDtype::F32: return at::kFloat;
    case SafetensorsDtype::F16: return at::kHalf;
    case SafetensorsDtype::BF16: return at::kBFloat16;
    case SafetensorsDtype::I64: return at::kLong;
    case SafetensorsDtype::I32: return at::kInt;
    case SafetensorsDtype::I16: return at::kShort;
    case SafetensorsDtype::I8: return at::kChar;
    case SafetensorsDtype::U8: return at::kByte;
    case SafetensorsDtype::BOOL: return at::kBool;
  }
  ST_ASSERT(false, "unhandled SafetensorsDtype");
  return at::kFloat;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  FileDescriptor file;
  file.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (file.fd < 0) throw Error(path + ": cannot open safetensors file: " + errno_text());
  struct stat info {};
  if (::fstat(file.fd, &info) != 0) throw Error(path + ": cannot stat: " + errno_text());
  if (!S_ISREG(info.st_mode)) throw Error(path + ": not a regular file");
  size_ = static_cast<std::size_t>(info.st_size);
  if (size_ > 0) {
    void* mapping = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, file.fd, 0);
    if (mapping == MAP_FAILED) throw Error(path + ": cannot mmap: " + errno_text());
    bytes_ = static_cast<const uint8_t*>(mapping);
  }
  try {
    static const uint8_t kEmpty = 0;
    header_ = parse_safetensors(bytes_ ? bytes_ : &kEmpty, size_, path);
  } catch (...) {
    if (bytes_) ::munmap(const_cast<uint8_t*>(bytes_), size_);
    bytes_ = nullptr;
    throw;
  }
  for (std::size_t i = 0; i < header_.entries.size(); ++i) index_[header_.entries[i].name] = i;
}

SafetensorsFile::~SafetensorsFile() {
  if (bytes_) ::munmap(const_cast<uint8_t*>(bytes_), size_);
}

bool SafetensorsFile::contains(const std::string& name) const { return index_.count(name) != 0; }

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  auto found = index_.find(name);
  if (found == index_.end()) throw Error(path_ + ": no tensor named '" + name + "'");
  return header_.entries[found->second];
}

at::Tensor SafetensorsFile::tensor(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  // memcpy into a fresh tensor instead of from_blob: the mapping is read-only
  // and a hostile file may misalign the data for its dtype.
  at::Tensor out = at::empty(e.shape, at::TensorOptions().dtype(to_scalar_type(e.dtype)));
  const std::size_t num_bytes = e.end - e.begin;
  if (num_bytes == 0) return out;
  const uint8_t* source = bytes_ + header_.data_start + e.begin;
  if (e.dtype == SafetensorsDtype::BOOL) {
    for (std::size_t i = 0; i < num_bytes; ++i)
      if (source[i] > 1)
        throw Error(path_ + ": tensor '" + name + "' is BOOL but byte " + std::to_string(i) + " is " +
                    std::to_string(source[i]) + " (must be 0 or 1)");
  }
  std::memcpy(out.data_ptr(), source, num_bytes);
  return out;
}

NamedTensors SafetensorsFile::all_tensors() const {
  NamedTensors out;
  out.reserve(header_.entries.size());
  for (const auto& e : header_.entries) out.emplace_back(e.name, tensor(e.name));
  return out;
}

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // The name checks come before any copy; the stream writer's constructor
  // repeats them and refuses unstorable dtypes before creating the file.
  std::vector<at::Tensor> host;
  std::vector<SafetensorsTensorSpec> specs;
  host.reserve(tensors.size());
  specs.reserve(tensors.size());
  std::map<std::string, int> seen;
  for (const auto& [name, tensor] : tensors) {
    if (name == "__metadata__") throw Error(path + ": a tensor may not be named __metadata__");
    if (seen[name]++) throw Error(path + ": tensor name '" + name + "' appears twice");
    if (!tensor.defined()) throw Error(path + ": tensor '" + name + "' is undefined");
    host.push_back(tensor.detach().to(at::kCPU).contiguous());
    specs.push_back({name, host.back().scalar_type(), host.back().sizes().vec()});
  }
  SafetensorsStreamWriter writer(path, std::move(specs), metadata);
  for (std::size_t i = 0; i < host.size(); ++i) writer.write_next(tensors[i].first, host[i]);
  writer.commit();
}

namespace {

}  // namespace

SafetensorsStreamWriter::SafetensorsStreamWriter(const std::string& path, std::vector<SafetensorsTensorSpec> specs,
                                                 const std::map<std::string, std::string>& metadata)
    : path_(path), specs_(std::move(specs)) {
  std::vector<SafetensorsBlob> blobs;
  blobs.reserve(specs_.size());
  std::map<std::string, int> seen;
  uint64_t data_bytes = 0;
  for (const auto& spec : specs_) {
    if (spec.name == "__metadata__") throw Error(path_ + ": a tensor may not be named __metadata__");
    if (seen[spec.name]++) throw Error(path_ + ": tensor name '" + spec.name + "' appears twice");
    SafetensorsBlob blob;
    blob.name = spec.name;
    blob.dtype = to_safetensors_dtype(spec.dtype);
    blob.shape = spec.shape;
    uint64_t bytes = safetensors_dtype_size(blob.dtype);
    for (int64_t d : spec.shape) {
      if (d < 0) throw Error(path_ + ": tensor '" + spec.name + "' has a negative dimension " + shape_text(spec.shape));
      if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes))
        throw Error(path_ + ": tensor '" + spec.name + "' of shape " + shape_text(spec.shape) + " is too large");
    }
    blob.num_bytes = static_cast<std::size_t>(bytes);
    data_bytes += bytes;
    blobs.push_back(std::move(blob));
  }
  const std::string header = serialize_safetensors_header(blobs, metadata);
  file_bytes_ = header.size() + data_bytes;

  out_ = std::make_unique<OutputFile>(path_);
  append(header.data(), header.size());
}

SafetensorsStreamWriter::~SafetensorsStreamWriter() { discard(); }

void SafetensorsStreamWriter::discard() { out_.reset(); }  // OutputFile removes its temporary file

void SafetensorsStreamWriter::fail(const std::string& message) {
  discard();
  throw Error(message);
}

void SafetensorsStreamWriter::append(const void* data, std::size_t num_bytes) {
  if (num_bytes == 0) return;
  try {
    out_->write(data, num_bytes);
  } catch (const Error& e) {
    fail(e.what());
  }
}

const SafetensorsTensorSpec& SafetensorsStreamWriter::check_next(const std::string& name, const at::Tensor& tensor,
                                                                  bool same_dtype) {
  if (committed_) throw Error(path_ + ": write after commit()");
  if (!out_) throw Error(path_ + ": the writer failed earlier; nothing more can be written");
  if (next_ == specs_.size())
    fail(path_ + ": tensor '" + name + "' is one more than the " + std::to_string(specs_.size()) +
         " the header lists");
  const SafetensorsTensorSpec& spec = specs_[next_];
  if (name != spec.name)
    fail(path_ + ": got tensor '" + name + "' but the header lists '" + spec.name + "' next (number " +
         std::to_string(next_) + ")");
  if (!tensor.defined()) fail(path_ + ": tensor '" + spec.name + "' (number " + std::to_string(next_) + ") is undefined");
  if (same_dtype && tensor.scalar_type() != spec.dtype)
    fail(path_ + ": tensor '" + spec.name + "' has dtype " + c10::toString(tensor.scalar_type()) +
         " but the header says " + c10::toString(spec.dtype));
  if (tensor.sizes() != at::IntArrayRef(spec.shape))
    fail(path_ + ": tensor '" + spec.name + "' has shape " + shape_text(tensor.sizes()) + " but the header says " +
         shape_text(spec.shape));
  return spec;
}

std::size_t SafetensorsStreamWriter::write_next(const std::string& name, const at::Tensor& tensor) {
  check_next(name, tensor, /*same_dtype=*/true);
  const bool copy = !tensor.device().is_cpu() || !tensor.is_contiguous();
  const at::Tensor host = copy ? tensor.detach().to(at::kCPU).contiguous() : tensor;
  const std::size_t num_bytes = static_cast<std::size_t>(host.numel()) * host.element_size();
  append(host.data_ptr(), num_bytes);
  ++next_;
  return copy ? num_bytes : 0;
}

std::size_t SafetensorsStreamWriter::write_next_converting(const std::string& name, const at::Tensor& tensor) {
  const SafetensorsTensorSpec& spec = check_next(name, tensor, /*same_dtype=*/false);
  if (tensor.scalar_type() == spec.dtype) return write_next(name, tensor);
  const bool copy = !tensor.device().is_cpu() || !tensor.is_contiguous();
  const at::Tensor flat = (copy ? tensor.detach().to(at::kCPU).contiguous() : tensor.detach()).reshape({-1});
  const int64_t numel = flat.numel();
  std::size_t held = 0;
  for (int64_t begin = 0; begin < numel; begin += kConvertChunkElements) {
    const at::Tensor chunk = flat.narrow(0, begin, std::min(kConvertChunkElements, numel - begin)).to(spec.dtype);
    const std::size_t num_bytes = static_cast<std::size_t>(chunk.numel()) * chunk.element_size();
    held = std::max(held, num_bytes);
    append(chunk.data_ptr(), num_bytes);
  }
  ++next_;
  return held + (copy ? static_cast<std::size_t>(numel) * flat.element_size() : 0);
}

void SafetensorsStreamWriter::commit() {
  if (committed_) throw Error(path_ + ": commit() called twice");
  if (!out_) throw Error(path_ + ": the writer failed earlier; nothing to commit");
  if (next_ != specs_.size())
    fail(path_ + ": commit() after " + std::to_string(next_) + " of " + std::to_string(specs_.size()) +
         " tensors (next: '" + specs_[next_].name + "')");
  try {
    out_->commit();
  } catch (const Error& e) {
    fail(e.what());
  }
  out_.reset();
  committed_ = true;
}

std::map<std::string, std::string> read_safetensors_index(const std::string& index_path) {
  require_regular_file(index_path, "sharded checkpoint index");  // a folder or a FIFO is refused before opening
  std::ifstream in(index_path, std::ios::binary);
  if (!in) throw Error(index_path + ": cannot open sharded checkpoint index");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_safetensors_index(text.str(), index_path);
}

}  // namespace shardtrain
