// DeepSpeed's batch-size keys -> train.batch_size and
// train.gradient_accumulation_steps (src/config/deepspeed_batch.cpp): numbers,
// derived values, "auto", and train_batch_size = micro x accumulation x world size.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <string>

#include "support/deepspeed_fixtures.h"

namespace test_deepspeed_batch_test {

using namespace shardtrain_test::deepspeed_tests;  // DsScratch, load, ..., and shardtrain's names

TEST_CASE("batch sizes: numbers override, train_batch_size must be micro x accumulation x world size") {
  DsScratch s;
  json ds = {{"zero_optimization", {{"stage", 2}}},
             {"train_micro_batch_size_per_gpu", 8},
             {"gradient_accumulation_steps", 4},
             {"train_batch_size", 64}};
  RunConfig c = load(s.config(ds), 2);  // 8 x 4 x 2 = 64
  CHECK(c.train.batch_size == 8);
  CHECK(c.train.gradient_accumulation_steps == 4);

  ds["train_batch_size"] = 60;
  const std::string message = error_of([&] { load(s.config(ds), 2); });
  CHECK(contains(message, "train_batch_size = 60: must equal train_micro_batch_size_per_gpu (8) x "
                          "gradient_accumulation_steps (4) x world size (2) = 64"));
  // 128 = 8 x 4 x 4: right for 4 ranks, wrong for 2.
  ds["train_batch_size"] = 128;
  CHECK(load(s.config(ds), 4).train.batch_size == 8);
  CHECK(contains(error_of([&] { load(s.config(ds), 2); }), "= 64"));

  // DeepSpeed derives an absent one from train_batch_size: 96 / (8 x 3 ranks) = 4 steps.
  json derive = {{"train_micro_batch_size_per_gpu", 8}, {"train_batch_size", 96}};
  CHECK(load(s.config(derive), 3).train.gradient_accumulation_steps == 4);
  // 96 / (2 steps x 3 ranks) = 16 per rank.
  derive = {{"gradient_accumulation_steps", 2}, {"train_batch_size", 96}};
  CHECK(load(s.config(derive), 3).train.batch_size == 16);
  // Only train_batch_size: accumulation 1, micro 96 / 3 = 32.
  derive = {{"train_batch_size", 96}};
  c = load(s.config(derive), 3);
  CHECK(c.train.batch_size == 32);
  CHECK(c.train.gradient_accumulation_steps == 1);
  derive = {{"train_micro_batch_size_per_gpu", 7}, {"train_batch_size", 96}};
  CHECK(contains(error_of([&] { load(s.config(derive), 3); }), "96 is not divisible by 21"));

  // "auto" takes the run config's values; an absent accumulation is 1 (DeepSpeed, Accelerate).
  json automatic = {{"train_micro_batch_size_per_gpu", "auto"}, {"gradient_accumulation_steps", "auto"}};
  c = load(s.config(automatic, "[train]\nbatch_size = 5\ngradient_accumulation_steps = 3\n"), 2);
  CHECK(c.train.batch_size == 5);
  CHECK(c.train.gradient_accumulation_steps == 3);
  CHECK(load(s.config({{"train_micro_batch_size_per_gpu", 4}}), 2).train.gradient_accumulation_steps == 1);

  // A number that contradicts a key the user set: both named (transformers refuses this too).
  const std::string conflict = error_of([&] { load(s.config(ds, "[train]\nbatch_size = 16\n"), 4); });
  CHECK(contains(conflict, "train_micro_batch_size_per_gpu = 8: means train.batch_size = 8 but the run config sets "
                           "train.batch_size = 16"));
  // ... also from the command line.
  CHECK(contains(error_of([&] { load(s.config(ds), 4, nullptr, {{"train.gradient_accumulation_steps", "2"}}); }),
                 "the run config sets train.gradient_accumulation_steps = 2"));
  // The same value set in both places is fine.
  CHECK(load(s.config(ds, "[train]\nbatch_size = 8\n"), 4).train.batch_size == 8);
}

TEST_CASE("batch sizes whose product overflows int64 are refused, not wrapped (found by tests/fuzz/fuzz_deepspeed)") {
  DsScratch s;
  // 2^62 x 4 wrapped to 0 (signed overflow, undefined behaviour) before.
  json ds = {{"train_micro_batch_size_per_gpu", int64_t(1) << 62}, {"gradient_accumulation_steps", 4}};
  CHECK(contains(error_of([&] { load(s.config(ds), 8); }), "is beyond 2^63 examples"));
  ds["train_batch_size"] = 64;
  CHECK(contains(error_of([&] { load(s.config(ds), 8); }), "is beyond 2^63 examples"));
  json derive = {{"train_micro_batch_size_per_gpu", int64_t(1) << 62}, {"train_batch_size", 64}};
  CHECK(contains(error_of([&] { load(s.config(derive), 4); }), "is beyond 2^63 examples"));
}

}  // namespace test_deepspeed_batch_test
