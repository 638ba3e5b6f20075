// Torch-free on purpose: tests/fuzz builds this file alone with libFuzzer.
#include "shardtrain/model/safetensors_format.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "shardtrain/core/check.h"
#include "shardtrain/core/json_read.h"

namespace shardtrain {
namespace {

using json = nlohmann::json;

struct DtypeName {
  const char* name;
  SafetensorsDtype dtype;
  std::size_t size;
};

constexpr DtypeName kDtypes[] = {
    {"F64", SafetensorsDtype::F64, 8}, {"F32", SafetensorsDtype::F32, 4}, {"F16", SafetensorsDtype::F16, 2},
    {"BF16", SafetensorsDtype::BF16, 2}, {"I64", SafetensorsDtype::I64, 8}, {"I32", SafetensorsDtype::I32, 4},
    {"I16", SafetensorsDtype::I16, 2}, {"I8", SafetensorsDtype::I8, 1}, {"U8", SafetensorsDtype::U8, 1},
    {"BOOL", SafetensorsDtype::BOOL, 1},
};

[[noreturn]] void fail(const std::string& source, const std::string& problem) {
  throw Error(source + ": not a valid safetensors file: " + problem);
}

// Quoted and cut short: names in a hostile header can be arbitrarily long.
std::string quoted(const std::string& text) {
  constexpr std::size_t kMax = 120;
  if (text.size() <= kMax) return "'" + text + "'";
  return "'" + text.substr(0, kMax) + "...'";
}

SafetensorsDtype parse_dtype(const json& value, const std::string& source, const std::string& name) {
  if (!value.is_string()) fail(source, "tensor " + quoted(name) + ": dtype is not a string");
  const std::string& text = value.get_ref<const std::string&>();
  for (const auto& known : kDtypes)
    if (text == known.name) return known.dtype;
  if (text == "F8_E4M3" || text == "F8_E5M2")
    fail(source, "tensor " + quoted(name) + ": dtype " + text + " (8-bit float) is not supported by shardtrain");
  if (text == "U16" || text == "U32" || text == "U64")
    fail(source, "tensor " + quoted(name) + ": dtype " + text + " (unsigned) is not supported by LibTorch");
  fail(source, "tensor " + quoted(name) + ": unknown dtype " + quoted(text) +
                   " (expected one of F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL)");
}

// Non-negative JSON integer. nlohmann keeps integers that fit in uint64 as
// number_unsigned and negatives as number_integer; floats ("1.0") are refused.
uint64_t parse_count(const json& value, const std::string& source, const std::string& what) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer()) fail(source, what + " is negative (" + std::to_string(value.get<int64_t>()) + ")");
  fail(source, what + " is not a non-negative integer (got " + quoted(value.dump()) + ")");
}

SafetensorsEntry parse_entry(const std::string& name, const json& info, const std::string& source) {
  if (!info.is_object()) fail(source, "tensor " + quoted(name) + ": entry is not a JSON object");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!info.contains(key)) fail(source, "tensor " + quoted(name) + ": entry has no \"" + key + "\"");

  SafetensorsEntry entry;
  entry.name = name;
  entry.dtype = parse_dtype(info["dtype"], source, name);

  const json& shape = info["shape"];
  if (!shape.is_array()) fail(source, "tensor " + quoted(name) + ": shape is not an array");
  uint64_t numel = 1;
  bool overflow = false;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    uint64_t dim = parse_count(shape[i], source, "tensor " + quoted(name) + ": shape[" + std::to_string(i) + "]");
    // int64 is what at::Tensor sizes hold.
    if (dim > static_cast<uint64_t>(INT64_MAX)) fail(source, "tensor " + quoted(name) + ": shape dimension too large");
    entry.shape.push_back(static_cast<int64_t>(dim));
    if (__builtin_mul_overflow(numel, dim, &numel)) overflow = true;
  }
  uint64_t expected_bytes = 0;
  if (overflow || __builtin_mul_overflow(numel, static_cast<uint64_t>(safetensors_dtype_size(entry.dtype)),
                                         &expected_bytes))
    fail(source, "tensor " + quoted(name) + ": shape product overflows");

  const json& offsets = info["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2)
    fail(source, "tensor " + quoted(name) + ": data_offsets is not an array [begin, end]");
  entry.begin = parse_count(offsets[0], source, "tensor " + quoted(name) + ": data_offsets[0]");
  entry.end = parse_count(offsets[1], source, "tensor " + quoted(name) + ": data_offsets[1]");
  if (entry.end < entry.begin)
    fail(source, "tensor " + quoted(name) + ": data_offsets end " + std::to_string(entry.end) + " < begin " +
                     std::to_string(entry.begin));
  if (entry.end - entry.begin != expected_bytes)
    fail(source, "tensor " + quoted(name) + ": data_offsets span " + std::to_string(entry.end - entry.begin) +
                     " bytes but dtype " + safetensors_dtype_name(entry.dtype) + " and shape need " +
                     std::to_string(expected_bytes) + " bytes");
  return entry;
}

void append_json_string(std::string& out, const std::string& text) { out += json(text).dump(); }

}  // namespace

const char* safetensors_dtype_name(SafetensorsDtype dtype) {
  for (const auto& known : kDtypes)
    if (known.dtype == dtype) return known.name;
  ST_ASSERT(false, "unknown SafetensorsDtype");
  return "?";
}

std::size_t safetensors_dtype_size(SafetensorsDtype dtype) {
  for (const auto& known : kDtypes)
    if (known.dtype == dtype) return known.size;
  ST_ASSERT(false, "unknown SafetensorsDtype");
  return 0;
}

uint64_t SafetensorsEntry::numel() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);  // validated not to overflow
  return n;
}

SafetensorsHeader parse_safetensors(const uint8_t* bytes, std::size_t size, const std::string& source) {
  if (size < 8) fail(source, "file has " + std::to_string(size) + " bytes, fewer than the 8-byte header length");
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | bytes[i];
  if (header_bytes > kMaxSafetensorsHeaderBytes)
    fail(source, "header length " + std::to_string(header_bytes) + " exceeds the limit of " +
                     std::to_string(kMaxSafetensorsHeaderBytes) + " bytes");
  if (header_bytes > size - 8)
    fail(source, "header length " + std::to_string(header_bytes) + " runs past the end of the file (" +
                     std::to_string(size) + " bytes; truncated?)");
  const char* text = reinterpret_cast<const char*>(bytes + 8);
  if (header_bytes == 0 || text[0] != '{') fail(source, "header does not start with '{'");

  // A valid header is at most 3 levels deep (root, entry, shape); refusing deeper
  // nesting while parsing bounds the work a hostile header can cause. A tensor
  // named twice is refused too (core/json_read.h).
  json header;
  try {
    header = parse_user_json(std::string(text, header_bytes), "header", 3);
  } catch (const Error& e) {
    fail(source, e.what());
  }
  if (!header.is_object()) fail(source, "header is not a JSON object");

  SafetensorsHeader result;
  result.data_start = 8 + header_bytes;
  result.data_bytes = size - result.data_start;
  for (const auto& item : header.items()) {
    if (item.key() == "__metadata__") {
      if (!item.value().is_object()) fail(source, "__metadata__ is not a JSON object");
      for (const auto& meta : item.value().items()) {
        if (!meta.value().is_string())
          fail(source, "__metadata__ value for " + quoted(meta.key()) + " is not a string");
        result.metadata[meta.key()] = meta.value().get<std::string>();
      }
      continue;
    }
    result.entries.push_back(parse_entry(item.key(), item.value(), source));
  }

  std::sort(result.entries.begin(), result.entries.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.end != b.end) return a.end < b.end;
    return a.name < b.name;
  });
  // Sorted ranges must tile [0, data_bytes): each starts where the previous ended.
  uint64_t position = 0;
  for (const auto& entry : result.entries) {
    if (entry.begin < position)
      fail(source, "tensor " + quoted(entry.name) + " overlaps the previous tensor (begins at byte " +
                       std::to_string(entry.begin) + ", previous ends at " + std::to_string(position) + ")");
    if (entry.begin > position)
      fail(source, "gap in the data area before tensor " + quoted(entry.name) + " (bytes " +
                       std::to_string(position) + ".." + std::to_string(entry.begin) + " belong to no tensor)");
    if (entry.end > result.data_bytes)
      fail(source, "tensor " + quoted(entry.name) + ": data_offsets end " + std::to_string(entry.end) +
                       " is past the data area (" + std::to_string(result.data_bytes) + " bytes; truncated?)");
    position = entry.end;
  }
  if (position != result.data_bytes)
    fail(source, "data area has " + std::to_string(result.data_bytes) + " bytes but the tensors cover " +
                     std::to_string(position) + " (trailing bytes or truncated header)");
  return result;
}

std::string serialize_safetensors_header(const std::vector<SafetensorsBlob>& blobs,
                                         const std::map<std::string, std::string>& metadata) {
  // Built by hand rather than through nlohmann::json so the key order is ours
  // (metadata first, then data order), not alphabetical.
  std::string header = "{";
  bool first = true;
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first_meta = true;
    for (const auto& [key, value] : metadata) {
      if (!first_meta) header += ",";
      first_meta = false;
      append_json_string(header, key);
      header += ":";
      append_json_string(header, value);
    }
    header += "}";
    first = false;
  }
  uint64_t offset = 0;
  for (const auto& blob : blobs) {
    ST_ASSERT(blob.name != "__metadata__", "a tensor may not be called __metadata__");
    uint64_t numel = 1;
    for (int64_t d : blob.shape) {
      ST_ASSERT(d >= 0, "negative dimension in " + blob.name);
      numel *= static_cast<uint64_t>(d);
    }
    ST_ASSERT(numel * safetensors_dtype_size(blob.dtype) == blob.num_bytes, "byte count mismatch for " + blob.name);
    if (!first) header += ",";
    first = false;
    append_json_string(header, blob.name);
    header += ":{\"dtype\":\"";
    header += safetensors_dtype_name(blob.dtype);
    header += "\",\"shape\":[";
    for (std::size_t i = 0; i < blob.shape.size(); ++i) {
      if (i) header += ",";
      header += std::to_string(blob.shape[i]);
    }
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + blob.num_bytes) + "]}";
    offset += blob.num_bytes;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');

  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header;
}

std::map<std::string, std::string> parse_safetensors_index(const std::string& text, const std::string& source) {
  const nlohmann::json index = parse_user_json(text, source);  // core/json_read.h
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throw Error(source + ": no \"weight_map\" object (expected {\"weight_map\": {tensor name: shard file}})");
  std::map<std::string, std::string> weight_map;
  for (const auto& item : index["weight_map"].items()) {
    if (!item.value().is_string())
      throw Error(source + ": weight_map[\"" + item.key() + "\"] is not a file name string");
    const std::string file = item.value().get<std::string>();
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..")
      throw Error(source + ": weight_map[\"" + item.key() + "\"] = \"" + file +
                  "\" must be a file name in the same folder");
    weight_map[item.key()] = file;
  }
  return weight_map;
}

}  // namespace shardtrain
