#include "shardtrain/model/safetensors.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "shardtrain/core/check.h"

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
  std::vector<at::Tensor> host;
  std::vector<SafetensorsBlob> blobs;
  host.reserve(tensors.size());
  blobs.reserve(tensors.size());
  std::map<std::string, int> seen;
  for (const auto& [name, tensor] : tensors) {
    if (name == "__metadata__") throw Error(path + ": a tensor may not be named __metadata__");
    if (seen[name]++) throw Error(path + ": tensor name '" + name + "' appears twice");
    if (!tensor.defined()) throw Error(path + ": tensor '" + name + "' is undefined");
    host.push_back(tensor.detach().to(at::kCPU).contiguous());
    const at::Tensor& t = host.back();
    SafetensorsBlob blob;
    blob.name = name;
    blob.dtype = to_safetensors_dtype(t.scalar_type());
    blob.shape.assign(t.sizes().begin(), t.sizes().end());
    blob.data = t.data_ptr();
    blob.num_bytes = t.numel() * t.element_size();
    blobs.push_back(blob);
  }
  const std::string header = serialize_safetensors_header(blobs, metadata);

  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(temporary + ": cannot open for writing: " + errno_text());
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    for (const auto& blob : blobs)
      if (blob.num_bytes) out.write(static_cast<const char*>(blob.data), static_cast<std::streamsize>(blob.num_bytes));
    out.flush();
    if (!out) throw Error(temporary + ": write failed (disk full?)");
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0)
    throw Error(path + ": cannot rename " + temporary + " into place: " + errno_text());
}

std::map<std::string, std::string> read_safetensors_index(const std::string& index_path) {
  std::ifstream in(index_path);
  if (!in) throw Error(index_path + ": cannot open sharded checkpoint index");
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(index_path + ": not valid JSON: " + e.what());
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throw Error(index_path + ": no \"weight_map\" object (expected {\"weight_map\": {tensor name: shard file}})");
  std::map<std::string, std::string> weight_map;
  for (const auto& item : index["weight_map"].items()) {
    if (!item.value().is_string())
      throw Error(index_path + ": weight_map[\"" + item.key() + "\"] is not a file name string");
    const std::string file = item.value().get<std::string>();
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..")
      throw Error(index_path + ": weight_map[\"" + item.key() + "\"] = \"" + file +
                  "\" must be a file name in the same folder");
    weight_map[item.key()] = file;
  }
  return weight_map;
}

}  // namespace shardtrain
