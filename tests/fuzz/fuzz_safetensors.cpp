// libFuzzer target for the safetensors header parser (src/model/safetensors_format.cpp),
// built without torch. After a successful parse every tensor's bytes are read,
// so AddressSanitizer reports any range the validation let through wrongly.
//   cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++-14 -DSHARDTRAIN_FUZZ=ON
//   cmake --build build-fuzz --target fuzz_safetensors
//   build-fuzz/tests/fuzz/fuzz_safetensors -max_total_time=60 tests/fuzz/corpus
#include <cstdint>
#include <cstdlib>
#include <string>

#include "shardtrain/core/check.h"
#include "shardtrain/model/safetensors_format.h"

// The parser's ST_ASSERTs end here; the real one lives in check.cpp (MPI, HDF5).
void shardtrain::fatal(const char*, const char*, int, const std::string&) { std::abort(); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    shardtrain::SafetensorsHeader header = shardtrain::parse_safetensors(data, size, "fuzz");
    volatile uint8_t sink = 0;
    for (const auto& entry : header.entries) {
      if (entry.end - entry.begin != entry.numel() * shardtrain::safetensors_dtype_size(entry.dtype)) std::abort();
      for (uint64_t i = entry.begin; i < entry.end; ++i) sink = sink ^ data[header.data_start + i];
    }
    if (header.data_start + header.data_bytes != size) std::abort();
  } catch (const shardtrain::Error&) {
    // Refusing the input is the expected outcome for nearly all of them.
  }
  return 0;
}
