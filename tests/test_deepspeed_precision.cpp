// DeepSpeed's fp16 and bf16 sections -> train.mixed_precision and
// train.fp16.* (src/config/deepspeed_precision.cpp): fp16 refused without a GPU,
// DeepSpeed's loss-scaling defaults, "auto", both enabled.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "shardtrain/config/deepspeed_config.h"
#include "support/deepspeed_fixtures.h"

namespace test_deepspeed_precision_test {

using namespace shardtrain_test::deepspeed_tests;  // DsScratch, load, ..., and shardtrain's names

TEST_CASE("fp16 is refused on a CPU-only build and with run.device = cpu, with a hint") {
  DsScratch s;
  // The reference JSON as is: fp16 on. This build has no CUDA (CI), so load_run_config refuses it.
  const std::string message = error_of([&] { load(s.config(reference_json()), 1); });
  CHECK(contains(message, "fp16.enabled = true: fp16 with loss scaling is a GPU mode"));
  CHECK(contains(message, "On CPU use bf16: \"fp16\": {\"enabled\": false} and \"bf16\": {\"enabled\": true}"));
  CHECK(contains(message, "fp32"));
  CHECK(count_items(message) == 1);

  RunConfig c;
  c.model.config = s.dir + "/bert.json";
  c.model.init = ModelInit::kRandom;
  s.config(reference_json());
  c.parallel.deepspeed_config = s.dir + "/ds.json";
  DeepSpeedContext context;
  context.cuda_build = true;  // a CUDA build, but run.device = Device::kCpu
  CHECK(contains(error_of([&] { RunConfig copy = c; apply_deepspeed_config(copy, context); }),
                 "run.device is \"cpu\""));
  c.run.device = Device::kCuda;  // a CUDA build on GPUs: fp16 is taken, with DeepSpeed's loss scaling
  RunConfig copy = c;
  const DeepSpeedResolution resolved = apply_deepspeed_config(copy, context);
  CHECK(copy.train.mixed_precision == Precision::kFp16);
  CHECK(copy.train.fp16.loss_scale == 0);  // dynamic
  CHECK(copy.train.fp16.initial_scale_power == 16);
  CHECK(copy.train.fp16.loss_scale_window == 1000);
  CHECK(copy.train.fp16.hysteresis == 2);
  CHECK(copy.train.fp16.min_loss_scale == 1);
  CHECK_FALSE(copy.train.fp16.consecutive_hysteresis);
  std::string printed;
  for (const auto& l : resolved.lines) printed += l + "\n";
  for (const char* line : {"fp16.loss_scale = (absent) -> train.fp16.loss_scale = 0 (DeepSpeed's default)",
                           "fp16.loss_scale_window = (absent) -> train.fp16.loss_scale_window = 1000 (DeepSpeed's default)",
                           "fp16.hysteresis = (absent) -> train.fp16.hysteresis = 2 (DeepSpeed's default)",
                           "fp16.min_loss_scale = (absent) -> train.fp16.min_loss_scale = 1 (DeepSpeed's default)",
                           "-> train.mixed_precision = \"fp16\"",
                           "parallel.strategy = \"zero3\"", "parallel.offload_optimizer = \"cpu\""}) {
    CAPTURE(line);
    CHECK(contains(printed, line));
  }
  // The JSON's own values win over DeepSpeed's defaults; one that contradicts a
  // key the run config sets names both.
  json custom = reference_json();
  custom["fp16"] = {{"enabled", true}, {"loss_scale", 0}, {"initial_scale_power", 12}, {"hysteresis", 4},
                    {"consecutive_hysteresis", true}, {"min_loss_scale", 0.25}};
  s.config(custom);
  RunConfig tuned = c;
  apply_deepspeed_config(tuned, context);
  CHECK(tuned.train.fp16.initial_scale_power == 12);
  CHECK(tuned.train.fp16.hysteresis == 4);
  CHECK(tuned.train.fp16.consecutive_hysteresis);
  CHECK(tuned.train.fp16.min_loss_scale == 0.25);
  custom["fp16"]["master_weights_in_fp32"] = true;
  s.config(custom);
  CHECK(contains(error_of([&] { RunConfig again = c; apply_deepspeed_config(again, context); }),
                 "fp16.master_weights_in_fp32 = true: not implemented"));
  s.config(reference_json());
  context.cuda_build = false;
  CHECK(contains(error_of([&] { RunConfig again = c; apply_deepspeed_config(again, context); }),
                 "this build of shardtrain has no CUDA"));
}

TEST_CASE("fp16 / bf16: numbers, \"auto\" from train.mixed_precision, both on is an error") {
  DsScratch s;
  json ds = {{"zero_optimization", {{"stage", 1}}}, {"bf16", {{"enabled", true}}}};
  CHECK(load(s.config(ds), 1).train.mixed_precision == Precision::kBf16);
  ds["bf16"]["enabled"] = "auto";
  CHECK(load(s.config(ds, "[train]\nmixed_precision = \"bf16\"\n"), 1).train.mixed_precision == Precision::kBf16);
  CHECK(load(s.config(ds), 1).train.mixed_precision == Precision::kNo);
  ds["bf16"]["enabled"] = false;
  ds["fp16"] = {{"enabled", false}};
  CHECK(load(s.config(ds), 1).train.mixed_precision == Precision::kNo);
  ds["bf16"]["enabled"] = true;
  ds["fp16"]["enabled"] = true;
  CHECK(contains(error_of([&] { load(s.config(ds), 1); }), "both enabled"));
  // A bf16 JSON against an explicit train.mixed_precision = Precision::kNo: both keys named.
  ds["fp16"]["enabled"] = false;
  const std::string message = error_of([&] { load(s.config(ds, "[train]\nmixed_precision = \"no\"\n"), 1); });
  CHECK(contains(message, "train.mixed_precision = \"bf16\" but the run config sets train.mixed_precision = \"no\""));
}

}  // namespace test_deepspeed_precision_test
