// libFuzzer target: a HF config.json of any family (EncoderConfig::from_json,
// src/model/encoder_config.cpp). What it accepts must be valid, and its
// to_json() must read back to the same config (what `export` writes and HF
// and resume read again). Seeds: corpus/hf_config (the shipped and fixture configs).
#include <cstdint>
#include <string>

#include "fuzz_support.h"
#include "shardtrain/core/check.h"
#include "shardtrain/model/encoder_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::string written;
  try {
    const shardtrain::EncoderConfig config = shardtrain::EncoderConfig::from_json(text, "config.json");
    config.validate("config.json");
    written = config.to_json();
  } catch (const shardtrain::Error&) {
    return 0;
  }
  // What we wrote, we read back, unchanged.
  const shardtrain::EncoderConfig again = shardtrain::EncoderConfig::from_json(written, "written config.json");
  FUZZ_REQUIRE(again.to_json() == written);
  return 0;
}
