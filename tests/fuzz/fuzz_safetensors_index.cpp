// libFuzzer target: a sharded checkpoint's model.safetensors.index.json
// (parse_safetensors_index, src/model/safetensors_format.cpp). Every shard it
// accepts must be a plain file name in the model's folder. Seeds: corpus/safetensors_index.
#include <cstdint>
#include <string>

#include "fuzz_support.h"
#include "shardtrain/core/check.h"
#include "shardtrain/model/safetensors_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    for (const auto& [name, shard] : shardtrain::parse_safetensors_index(text, "model.safetensors.index.json")) {
      FUZZ_REQUIRE(!shard.empty() && shard.find('/') == std::string::npos && shard != "." && shard != "..");
    }
  } catch (const shardtrain::Error&) {
  }
  return 0;
}
