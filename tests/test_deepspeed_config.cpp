// Reading a DeepSpeed JSON as a whole (src/config/deepspeed_config.cpp): a
// top-level key (gradient_clipping), every problem named in one message, and
// a printed run config that loads back, a changed value there named as a
// contradiction. The sections have their own test_deepspeed_<section>.cpp.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <fstream>
#include <string>

#include "support/deepspeed_fixtures.h"

namespace test_deepspeed_config_test {

using namespace shardtrain_test::deepspeed_tests;  // DsScratch, load, ..., and shardtrain's names

TEST_CASE("gradient_clipping: number, true, \"auto\", absent") {
  DsScratch s;
  CHECK(load(s.config({{"gradient_clipping", 0.5}}), 1).train.max_grad_norm == 0.5);
  CHECK(load(s.config({{"gradient_clipping", true}}), 1).train.max_grad_norm == 1.0);  // DeepSpeed reads true as 1.0
  CHECK(load(s.config({{"gradient_clipping", "auto"}}, "[train]\nmax_grad_norm = 2.5\n"), 1).train.max_grad_norm ==
        2.5);
  CHECK(load(s.config(json::object()), 1).train.max_grad_norm == 0.0);  // absent: DeepSpeed does not clip
  CHECK(contains(error_of([&] { load(s.config({{"gradient_clipping", -1}}), 1); }),
                 "gradient_clipping = -1: expected a number >= 0"));
}

TEST_CASE("every key that is not implemented is named, all in one message") {
  DsScratch s;
  const json ds = {
      {"zero_optimization",
       {{"stage", 3},
        {"offload_param", {{"device", "cpu"}, {"pin_memory", true}}},
        {"stage3_max_live_parameters", 1e9},
        {"sub_group_size", 1e9}}},
      {"activation_checkpointing", {{"cpu_checkpointing", true}}},
      {"wall_clock_breakdown", true},
      {"fp16", {{"enabled", false}}},
      {"scheduler", {{"type", "OneCycle"}, {"params", {{"cycle_max_lr", 1e-4}}}}},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 2e-5}, {"amsgrad", true}}}}},
  };
  const std::string message = error_of([&] { load(s.config(ds), 1); });
  CHECK(contains(message, "7 keys need changing:"));
  CHECK(count_items(message) == 7);
  CHECK(contains(message, "zero_optimization.offload_param.device = \"cpu\": parameter offload is not implemented"));
  CHECK(contains(message, "zero_optimization.stage3_max_live_parameters = 1000000000.0: not implemented"));
  CHECK(contains(message, "zero_optimization.sub_group_size"));
  CHECK(contains(message, "activation_checkpointing.cpu_checkpointing = true: keeping checkpointed activations in "
                          "host memory is not implemented"));
  CHECK(contains(message, "wall_clock_breakdown = true"));
  CHECK(contains(message, "scheduler.type = \"OneCycle\": not implemented"));
  CHECK(contains(message, "optimizer.params.amsgrad = true"));
}

TEST_CASE("a run config printed after a DeepSpeed JSON loads back to the same values") {
  DsScratch s;
  json ds = reference_json();
  ds["fp16"]["enabled"] = false;
  const RunConfig c = load(s.config(ds), 2);
  const std::string printed = shardtrain::config_to_toml(c);
  std::ofstream(s.dir + "/printed.toml") << printed;
  const RunConfig again = load(s.dir + "/printed.toml", 2);
  CHECK(shardtrain::config_to_toml(again) == printed);
  // ... but changing one of the JSON's values there is a contradiction that names both.
  CHECK(contains(error_of([&] { load(s.dir + "/printed.toml", 2, nullptr, {{"parallel.zero.overlap_comm", "false"}}); }),
                 "zero_optimization.overlap_comm = true: means parallel.zero.overlap_comm = true but the run config "
                 "sets parallel.zero.overlap_comm = false"));
}

}  // namespace test_deepspeed_config_test
