// DeepSpeed's optimizer section -> AdamW's train.* keys
// (src/config/deepspeed_optimizer.cpp): numbers, "auto", DeepSpeed's defaults.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <string>

#include "support/deepspeed_fixtures.h"

namespace test_deepspeed_optimizer_test {

using namespace shardtrain_test::deepspeed_tests;  // DsScratch, load, ..., and shardtrain's names

TEST_CASE("optimizer: AdamW params as numbers, \"auto\" and DeepSpeed's defaults") {
  DsScratch s;
  json ds = {{"optimizer",
              {{"type", "AdamW"},
               {"params", {{"lr", 3e-5}, {"betas", {0.8, 0.99}}, {"eps", 1e-6}, {"weight_decay", 0.1}}}}}};
  RunConfig c = load(s.config(ds), 1);
  CHECK(c.train.lr == 3e-5);
  CHECK(c.train.adam_beta1 == 0.8);
  CHECK(c.train.adam_beta2 == 0.99);
  CHECK(c.train.adam_epsilon == 1e-6);
  CHECK(c.train.weight_decay == 0.1);

  ds["optimizer"]["params"] = {{"lr", "auto"}, {"betas", "auto"}, {"eps", "auto"}, {"weight_decay", "auto"}};
  c = load(s.config(ds, "[train]\nlr = 4e-5\nadam_beta2 = 0.98\nweight_decay = 0.02\n"), 1);
  CHECK(c.train.lr == 4e-5);
  CHECK(c.train.adam_beta1 == 0.9);
  CHECK(c.train.adam_beta2 == 0.98);
  CHECK(c.train.adam_epsilon == 1e-8);
  CHECK(c.train.weight_decay == 0.02);

  // Absent params: DeepSpeed's optimizer defaults (FusedAdam / DeepSpeedCPUAdam: lr 1e-3,
  // weight_decay 0; torch.optim.AdamW with torch_adam: weight_decay 0.01).
  ds["optimizer"] = {{"type", "Adam"}};
  c = load(s.config(ds), 1);
  CHECK(c.train.lr == 1e-3);
  CHECK(c.train.weight_decay == 0.0);
  ds["optimizer"]["params"] = {{"torch_adam", true}, {"adam_w_mode", true}};
  CHECK(load(s.config(ds), 1).train.weight_decay == 0.01);

  ds["optimizer"]["params"] = {{"adam_w_mode", false}};
  CHECK(contains(error_of([&] { load(s.config(ds), 1); }), "Adam with L2 regularisation is not implemented"));
  ds["optimizer"] = {{"type", "Lamb"}};
  CHECK(contains(error_of([&] { load(s.config(ds), 1); }), "optimizer.type = \"Lamb\": only \"AdamW\""));
}

}  // namespace test_deepspeed_optimizer_test
