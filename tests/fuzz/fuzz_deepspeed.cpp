// libFuzzer target: a DeepSpeed JSON config with "auto" values
// (apply_deepspeed_config, src/config/deepspeed_*.cpp), resolved into a run config
// and validated as `train` does. The first byte picks the world size (1-8) and
// whether the build has CUDA; the rest is the JSON. Seeds: corpus/deepspeed.
#include <cstdint>
#include <string>

#include "fuzz_support.h"
#include "shardtrain/config/config.h"
#include "shardtrain/config/deepspeed_config.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  shardtrain::set_log_rank(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string json(reinterpret_cast<const char*>(data + 1), size - 1);
  shardtrain::RunConfig config;
  config.parallel.deepspeed_config = fuzz_support::write_scratch("ds.json", json);
  shardtrain::DeepSpeedContext context;
  context.world_size = 1 + (data[0] & 7);
  context.cuda_build = (data[0] & 8) != 0;
  context.hidden_size = 64;  // the "auto" bucket sizes need one
  try {
    const shardtrain::DeepSpeedResolution resolution = shardtrain::apply_deepspeed_config(config, context);
    shardtrain::validate_run_config(config, resolution.keys_set);
    FUZZ_REQUIRE(config.train.batch_size > 0);
  } catch (const shardtrain::Error&) {
  }
  return 0;
}
