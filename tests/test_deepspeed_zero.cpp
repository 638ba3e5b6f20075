// DeepSpeed's zero_optimization section -> parallel.strategy, parallel.zero.*
// and parallel.offload_optimizer (src/config/deepspeed_zero.cpp): the stages,
// DeepSpeed's defaults and spellings, and the "auto" bucket sizes that need
// the model's hidden_size.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <fstream>
#include <string>
#include <vector>

#include "shardtrain/config/deepspeed_config.h"
#include "support/deepspeed_fixtures.h"

namespace test_deepspeed_zero_test {

using namespace shardtrain_test::deepspeed_tests;  // DsScratch, load, ..., and shardtrain's names

TEST_CASE("zero_optimization.stage chooses the strategy; stage-specific keys") {
  DsScratch s;
  const StrategyKind expected[] = {StrategyKind::kDdp, StrategyKind::kZero1, StrategyKind::kZero2, StrategyKind::kZero3};
  for (int stage = 0; stage <= 3; ++stage)
    CHECK(load(s.config({{"zero_optimization", {{"stage", stage}}}}), 1).parallel.strategy == expected[stage]);
  CHECK(load(s.config(json::object()), 1).parallel.strategy == StrategyKind::kDdp);  // absent: DeepSpeed's stage 0
  CHECK(contains(error_of([&] { load(s.config({{"zero_optimization", {{"stage", 4}}}}), 1); }),
                 "zero_optimization.stage = 4: ZeRO stages are 0, 1, 2 and 3"));
  CHECK(contains(error_of([&] {
                   load(s.config({{"zero_optimization", {{"stage", 0}, {"offload_optimizer", {{"device", "cpu"}}}}}}),
                        1);
                 }),
                 "optimizer offload needs ZeRO stage 1, 2 or 3"));

  // Stage 2: the ZeRO knobs are taken; stage-3-only keys are reported as unused, not applied.
  std::vector<std::string> lines;
  const RunConfig c =
      load(s.config({{"zero_optimization",
                      {{"stage", 2},
                       {"overlap_comm", false},
                       {"contiguous_gradients", false},
                       {"reduce_bucket_size", 2e8},
                       {"allgather_bucket_size", 123456},
                       {"round_robin_gradients", true},
                       {"stage3_prefetch_bucket_size", "auto"},
                       {"stage3_gather_16bit_weights_on_model_save", true}}}}),
           1, &lines);
  CHECK(c.parallel.strategy == StrategyKind::kZero2);
  CHECK_FALSE(c.parallel.zero.overlap_comm);
  CHECK_FALSE(c.parallel.zero.contiguous_gradients);
  CHECK(c.parallel.zero.reduce_bucket_size == 200000000);  // 2e8 written as a float is an integer
  CHECK(c.parallel.zero.allgather_bucket_size == 123456);
  CHECK(c.parallel.zero.round_robin_gradients);
  CHECK(c.parallel.zero.stage3_prefetch_bucket_size == shardtrain::ZeroConfig().stage3_prefetch_bucket_size);
  CHECK_FALSE(c.parallel.zero.gather_16bit_weights_on_model_save);
  CHECK(has_line(lines, "stage3_prefetch_bucket_size = \"auto\" -> not used below stage 3"));
  CHECK(has_line(lines, "stage3_gather_16bit_weights_on_model_save = true -> not used below stage 3"));

  // Absent knobs get DeepSpeed's defaults: overlap_comm false below stage 3, true at stage 3.
  CHECK_FALSE(load(s.config({{"zero_optimization", {{"stage", 1}}}}), 1).parallel.zero.overlap_comm);
  const RunConfig three = load(s.config({{"zero_optimization", {{"stage", 3}}}}), 1);
  CHECK(three.parallel.zero.overlap_comm);
  CHECK(three.parallel.zero.reduce_bucket_size == 500000000);
  CHECK(three.parallel.zero.stage3_prefetch_bucket_size == 50000000);
  CHECK(three.parallel.zero.stage3_param_persistence_threshold == 100000);
  CHECK(three.parallel.offload_optimizer == OffloadDevice::kNone);

  // DeepSpeed's other spellings of the stage-3 keys.
  const RunConfig aliases = load(s.config({{"zero_optimization",
                                            {{"stage", 3},
                                             {"prefetch_bucket_size", 1000},
                                             {"param_persistence_threshold", 10},
                                             {"stage3_gather_fp16_weights_on_model_save", true}}}}),
                                 1);
  CHECK(aliases.parallel.zero.stage3_prefetch_bucket_size == 1000);
  CHECK(aliases.parallel.zero.stage3_param_persistence_threshold == 10);
  CHECK(aliases.parallel.zero.gather_16bit_weights_on_model_save);
  // "auto": Accelerate's false.
  CHECK_FALSE(load(s.config({{"zero_optimization", {{"stage", 3}, {"stage3_gather_16bit_weights_on_model_save", "auto"}}}}),
                   1)
                  .parallel.zero.gather_16bit_weights_on_model_save);
}

TEST_CASE("\"auto\" bucket sizes need the model's hidden_size") {
  DsScratch s;
  std::ofstream(s.dir + "/bert.json") << "{\"num_hidden_layers\": 2}";
  const json ds = {{"zero_optimization", {{"stage", 3}, {"reduce_bucket_size", "auto"}}}};
  const std::string message = error_of([&] { load(s.config(ds), 1); });
  CHECK(contains(message, "zero_optimization.reduce_bucket_size = \"auto\""));
  CHECK(contains(message, "bert.json' has no positive integer \"hidden_size\""));
  // A model with "hidden_sizes" (Accelerate takes the largest).
  std::ofstream(s.dir + "/bert.json") << "{\"hidden_sizes\": [64, 256, 128]}";
  CHECK(load(s.config(ds), 1).parallel.zero.reduce_bucket_size == 256 * 256);
  // Not valid JSON, not an object: the file is named.
  const RunConfig c = load(s.config(ds), 1);
  std::ofstream(s.dir + "/broken.json") << "{\"zero_optimization\": ";
  RunConfig broken = c;
  broken.parallel.deepspeed_config = s.dir + "/broken.json";
  CHECK(contains(error_of([&] { apply_deepspeed_config(broken, DeepSpeedContext()); }), "broken.json': not valid JSON"));
}

}  // namespace test_deepspeed_zero_test
