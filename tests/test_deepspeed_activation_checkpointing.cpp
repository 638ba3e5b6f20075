// DeepSpeed's activation_checkpointing section -> model.gradient_checkpointing
// (src/config/deepspeed_activation_checkpointing.cpp), and its knobs named.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "support/deepspeed_fixtures.h"

namespace test_deepspeed_activation_checkpointing_test {

using namespace shardtrain_test::deepspeed_tests;  // DsScratch, load, ..., and shardtrain's names

TEST_CASE("activation_checkpointing turns on model.gradient_checkpointing; its knobs are named") {
  DsScratch s;
  CHECK_FALSE(load(s.config(json::object()), 1).model.gradient_checkpointing);
  std::vector<std::string> lines;
  const json section = {{"partition_activations", true},          {"cpu_checkpointing", false},
                        {"contiguous_memory_optimization", false}, {"number_checkpoints", nullptr},
                        {"synchronize_checkpoint_boundary", false}, {"profile", false}};
  CHECK(load(s.config({{"activation_checkpointing", section}}), 1, &lines).model.gradient_checkpointing);
  CHECK(has_line(lines, "-> model.gradient_checkpointing = true"));
  CHECK(has_line(lines, "activation_checkpointing.partition_activations = true -> accepted, no effect"));
  CHECK(has_line(lines, "activation_checkpointing.number_checkpoints = null -> accepted, no effect"));
  // The run config saying otherwise is a contradiction, named with both keys.
  CHECK(contains(error_of([&] {
                   load(s.config({{"activation_checkpointing", json::object()}}), 1, nullptr,
                        {{"model.gradient_checkpointing", "false"}});
                 }),
                 "activation_checkpointing = {}: means model.gradient_checkpointing = true but the run config sets "
                 "model.gradient_checkpointing = false"));
  CHECK(contains(error_of([&] { load(s.config({{"activation_checkpointing", {{"profile", true}}}}), 1); }),
                 "activation_checkpointing.profile = true: DeepSpeed's checkpointing profiler is not implemented"));
  CHECK(contains(error_of([&] { load(s.config({{"activation_checkpointing", {{"partition", true}}}}), 1); }),
                 "activation_checkpointing.partition = true: not a DeepSpeed activation_checkpointing key"));
}

}  // namespace test_deepspeed_activation_checkpointing_test
