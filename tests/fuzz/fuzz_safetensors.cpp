// libFuzzer target: the safetensors header parser (src/model/safetensors_format.cpp).
// After a successful parse every tensor's bytes are read, so AddressSanitizer
// reports any range the validation let through wrongly. Seeds: corpus/safetensors.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fuzz_support.h"
#include "shardtrain/core/check.h"
#include "shardtrain/model/safetensors_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    shardtrain::SafetensorsHeader header = shardtrain::parse_safetensors(data, size, "fuzz");
    volatile uint8_t sink = 0;
    for (const auto& entry : header.entries) {
      FUZZ_REQUIRE(entry.end - entry.begin == entry.numel() * shardtrain::safetensors_dtype_size(entry.dtype));
      for (uint64_t i = entry.begin; i < entry.end; ++i) sink = sink ^ data[header.data_start + i];
    }
    FUZZ_REQUIRE(header.data_start + header.data_bytes == size);
  } catch (const shardtrain::Error&) {
    // Refusing the input is the expected outcome for nearly all of them.
  }
  return 0;
}
