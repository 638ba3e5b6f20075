// libFuzzer target: the trimming of TensorBoard event files on resume
// (trim_tensorboard_events, src/report/tensorboard.cpp). The first byte is the
// step to trim to (0-255); the rest is an event file, intact, torn or hostile.
// After the trim the file must read back with every CRC right and no step above
// it. Seeds: corpus/tensorboard (files TensorBoardWriter wrote, cut and damaged).
#include <cstdint>
#include <string>

#include "fuzz_support.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/report/tensorboard.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  shardtrain::set_log_rank(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int64_t max_step = data[0];
  fuzz_support::clear_scratch();
  const std::string file = fuzz_support::write_scratch("events.out.tfevents.1.fuzz",
                                                       std::string(reinterpret_cast<const char*>(data + 1), size - 1));
  try {
    shardtrain::trim_tensorboard_events(fuzz_support::scratch().string(), max_step);
  } catch (const shardtrain::Error&) {
    return 0;
  }
  std::vector<shardtrain::TensorBoardScalar> scalars;
  try {
    scalars = shardtrain::read_tensorboard_scalars(file);
  } catch (const shardtrain::Error& e) {
    std::fprintf(stderr, "fuzz: the trimmed event file does not read back: %s\n", e.what());
    std::abort();
  }
  for (const auto& scalar : scalars) FUZZ_REQUIRE(scalar.step <= max_step);
  return 0;
}
