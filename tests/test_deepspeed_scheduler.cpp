// DeepSpeed's scheduler section -> train.lr_scheduler_type and
// train.lr_scheduler_kwargs (src/config/deepspeed_scheduler.cpp): each type's
// params, "auto" as transformers fills it, DeepSpeed's defaults, and what is refused.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "support/deepspeed_fixtures.h"

namespace test_deepspeed_scheduler_test {

using namespace shardtrain_test::deepspeed_tests;  // DsScratch, load, ..., and shardtrain's names

TEST_CASE("scheduler: the type and its params map to train.lr_scheduler_type and _kwargs") {
  DsScratch s;
  json ds = {{"scheduler",
              {{"type", "WarmupDecayLR"},
               {"params",
                {{"warmup_min_lr", 0},
                 {"warmup_max_lr", 5e-5},
                 {"warmup_num_steps", 50},
                 {"warmup_type", "linear"},
                 {"total_num_steps", "auto"}}}}}};
  std::vector<std::string> lines;
  RunConfig c = load(s.config(ds), 1, &lines);
  CHECK(c.train.lr_scheduler_type == shardtrain::LrSchedulerType::kWarmupDecayLR);
  CHECK(c.train.warmup_steps == 50);
  CHECK(c.train.warmup_ratio == 0.0);
  CHECK(c.train.lr == 5e-5);
  CHECK(c.train.lr_scheduler_kwargs.warmup_type == shardtrain::WarmupType::kLinear);
  CHECK(c.train.lr_scheduler_kwargs.total_num_steps == 0);  // the run's steps
  CHECK(has_line(lines, "scheduler.params.total_num_steps = \"auto\" -> the run's total optimizer steps"));

  // "auto" as transformers fills it: warmup_min_lr 0, warmup_max_lr train.lr, warmup_num_steps the run's warmup.
  ds["scheduler"]["params"] = {{"warmup_min_lr", "auto"},
                               {"warmup_max_lr", "auto"},
                               {"warmup_num_steps", "auto"},
                               {"warmup_type", "linear"},
                               {"total_num_steps", "auto"}};
  c = load(s.config(ds, "[train]\nwarmup_ratio = 0.1\nlr = 1e-4\n"), 1);
  CHECK(c.train.warmup_ratio == 0.1);
  CHECK(c.train.warmup_steps == 0);
  CHECK(c.train.lr == 1e-4);
  CHECK(c.train.lr_scheduler_kwargs.warmup_min_lr == 0.0);

  // Absent params take DeepSpeed's defaults: warmup_max_lr 0.001, warmup_num_steps 1000, warmup_type "log".
  lines.clear();
  c = load(s.config(json{{"scheduler", {{"type", "WarmupLR"}}}}), 1, &lines);
  CHECK(c.train.lr_scheduler_type == shardtrain::LrSchedulerType::kWarmupLR);
  CHECK(c.train.lr == 0.001);
  CHECK(c.train.warmup_steps == 1000);
  CHECK(c.train.lr_scheduler_kwargs.warmup_type == shardtrain::WarmupType::kLog);
  CHECK(has_line(lines, "scheduler.params.warmup_max_lr = (absent) -> train.lr = 0.001 (DeepSpeed's default)"));

  // WarmupCosineLR scales the optimizer's lr; a fixed total_num_steps is kept.
  ds = {{"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 3e-4}}}}},
        {"scheduler",
         {{"type", "WarmupCosineLR"},
          {"params",
           {{"total_num_steps", 1000}, {"warmup_num_steps", 20}, {"warmup_min_ratio", 0.1}, {"cos_min_ratio", 0.01}}}}}};
  c = load(s.config(ds), 1);
  CHECK(c.train.lr_scheduler_type == shardtrain::LrSchedulerType::kWarmupCosineLR);
  CHECK(c.train.lr == 3e-4);
  CHECK(c.train.warmup_steps == 20);
  CHECK(c.train.lr_scheduler_kwargs.total_num_steps == 1000);
  CHECK(c.train.lr_scheduler_kwargs.warmup_min_ratio == 0.1);
  CHECK(c.train.lr_scheduler_kwargs.cos_min_ratio == 0.01);
  CHECK(c.train.lr_scheduler_kwargs.warmup_type == shardtrain::WarmupType::kLog);

  // The resolved config reads back without the JSON deciding twice.
  const std::string toml = shardtrain::config_to_toml(c);
  CHECK(contains(toml, "[train.lr_scheduler_kwargs]\n"));
  CHECK(contains(toml, "total_num_steps = 1000\n"));

  // warmup_max_lr against a different optimizer lr: DeepSpeed would silently use warmup_max_lr.
  ds = {{"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-5}}}}},
        {"scheduler", {{"type", "WarmupLR"}, {"params", {{"warmup_max_lr", 2e-5}}}}}};
  CHECK(contains(error_of([&] { load(s.config(ds), 1); }), "differs from optimizer.params.lr = 1e-05"));
  ds["scheduler"]["params"] = json::object();  // absent: DeepSpeed's 0.001, the same trap
  CHECK(contains(error_of([&] { load(s.config(ds), 1); }),
                 "scheduler.params.warmup_max_lr (absent): means train.lr = 0.001 (DeepSpeed's default), which "
                 "differs from optimizer.params.lr = 1e-05"));
  // A run-config key the JSON contradicts names both.
  CHECK(contains(error_of([&] { load(s.config(json{{"scheduler", {{"type", "WarmupLR"}}}},
                                                  "[train]\nlr_scheduler_type = \"cosine\"\n"), 1); }),
                 "means train.lr_scheduler_type = \"WarmupLR\" but the run config sets train.lr_scheduler_type = "
                 "\"cosine\""));
}

TEST_CASE("scheduler: what DeepSpeed would refuse or shardtrain does not implement") {
  DsScratch s;
  const json ds = {{"scheduler",
                    {{"type", "WarmupCosineLR"},
                     {"params", {{"warmup_max_lr", 1e-4}, {"warmup_type", "exp"}, {"last_batch_iteration", 10}}}}}};
  const std::string message = error_of([&] { load(s.config(ds), 1); });
  CHECK(count_items(message) == 4);
  CHECK(contains(message, "scheduler.params.warmup_max_lr = 0.0001: not a WarmupCosineLR parameter (it has "
                          "warmup_num_steps, warmup_type, total_num_steps, warmup_min_ratio, cos_min_ratio, "
                          "last_batch_iteration)"));
  CHECK(contains(message, "scheduler.params.warmup_type = \"exp\": expected \"log\" or \"linear\""));
  CHECK(contains(message, "scheduler.params.total_num_steps (absent): WarmupCosineLR needs it"));
  CHECK(contains(message, "scheduler.params.last_batch_iteration = 10: only -1 is implemented"));
  CHECK(contains(error_of([&] { load(s.config(json{{"scheduler", {{"type", "OneCycle"}}}}), 1); }),
                 "scheduler.type = \"OneCycle\": not implemented"));
  CHECK(contains(error_of([&] { load(s.config(json{{"scheduler", {{"type", "cosine"}}}}), 1); }),
                 "scheduler.type = \"cosine\": expected \"WarmupLR\", \"WarmupDecayLR\" or \"WarmupCosineLR\""));
}

}  // namespace test_deepspeed_scheduler_test
