// libFuzzer target: a HF config.json of any family (EncoderConfig::from_json,
// src/model/encoder_config.cpp). What it accepts must be valid, and its
// to_json() must read back to the same config (what `export` writes and HF
// and resume read again). Seeds: corpus/hf_config (the shipped and fixture configs).
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_support.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/json_read.h"
#include "shardtrain/model/encoder_config.h"

namespace {

// Up to 1,048,576 labels is a valid config (extreme classification has that
// many), and its label tables cost time linear in them: about 65 us a label
// in this instrumented build, so num_labels 598982 outlived libFuzzer's 10 s
// timeout in the longer run of 2026-12-04 (not a hang: 4.1 s for 60k labels,
// 7.8 s for 120k). Beyond kFuzzMaxLabels a case only costs time here; the
// bound itself is test_preflight's.
constexpr int64_t kFuzzMaxLabels = 4096;

bool too_many_labels(const std::string& text) {
  try {
    const nlohmann::json j = shardtrain::parse_user_json(text, "config.json");
    if (!j.is_object()) return false;
    const auto labels = j.find("num_labels");
    if (labels != j.end() && labels->is_number() && labels->get<double>() > kFuzzMaxLabels) return true;
    const auto table = j.find("id2label");
    return table != j.end() && table->size() > static_cast<size_t>(kFuzzMaxLabels);
  } catch (const shardtrain::Error&) {
    return false;  // from_json refuses it too, quickly
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (too_many_labels(text)) return 0;
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
