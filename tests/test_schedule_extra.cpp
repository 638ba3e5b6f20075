// transformers' inverse_sqrt, cosine_with_min_lr and warmup_stable_decay
// (optim/schedule.h) against values from their formulas
// (tests/fixtures/make_schedule_values.py prints the tables), their kwargs'
// checks, and WarmupCosineLR's warning when total_num_steps is below the
// warmup. Tolerance as in test_schedule.cpp: 1e-15 relative.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/run_config.h"
#include "shardtrain/optim/schedule.h"
#include "support/scratch_dir.h"

namespace test_schedule_extra_test {

using namespace shardtrain;
using ExtraTable = std::vector<std::pair<int64_t, double>>;

TrainConfig schedule_extra_train(const std::string& type) {
  TrainConfig t;
  t.lr_scheduler_type = parse_enum<LrSchedulerType>(type, "train.lr_scheduler_type");
  t.lr = 3e-4;
  return t;
}

void schedule_extra_check(const LrSchedule& schedule, const ExtraTable& expected) {
  for (const auto& [step, lr] : expected) {
    INFO(enum_name(schedule.type()), " step ", step);
    if (lr == 0.0) CHECK(schedule.lr(step) == 0.0);
    else CHECK(schedule.lr(step) == doctest::Approx(lr).epsilon(1e-15).scale(0));
  }
}

std::string schedule_extra_error(const TrainConfig& t, int64_t total = 100, int64_t warmup = 10) {
  try {
    make_lr_schedule(t, total, warmup);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST_CASE("inverse_sqrt: warmup, then 1 / sqrt((s + timescale - W) / timescale)") {
  TrainConfig t = schedule_extra_train("inverse_sqrt");
  schedule_extra_check(make_lr_schedule(t, 100, 10),
                       {{0, 0.0}, {5, 0.00015}, {10, 0.0003}, {11, 0.0002860387767736776}, {40, 0.00015},
                        {99, 9.534625892455922e-05}, {1000, 2.9999999999999997e-05}});
  schedule_extra_check(make_lr_schedule(t, 100, 0),  // no warmup: timescale 10000
                       {{0, 0.0003}, {1, 0.0002999850011249063}, {100, 0.0002985111570629968},
                        {20000, 0.00017320508075688773}});
  t.lr_scheduler_kwargs.timescale = 25;
  schedule_extra_check(make_lr_schedule(t, 100, 10),
                       {{0, 0.0}, {10, 0.0003}, {30, 0.00022360679774997895}, {99, 0.0001404878717372541}});
}

TEST_CASE("cosine_with_min_lr: the cosine ends at min_lr (or min_lr_rate x lr)") {
  TrainConfig t = schedule_extra_train("cosine_with_min_lr");
  t.lr_scheduler_kwargs.min_lr_rate = 0.1;
  schedule_extra_check(make_lr_schedule(t, 100, 10),
                       {{0, 0.0}, {5, 0.00015}, {10, 0.0003}, {37, 0.00024435100905948387}, {55, 0.000165},
                        {99, 3.008223835242207e-05}, {100, 2.9999999999999997e-05}, {120, 6.158400017893796e-05}});
  t.lr_scheduler_kwargs.min_lr_rate.reset();
  t.lr_scheduler_kwargs.min_lr = 3e-5;
  t.lr_scheduler_kwargs.num_cycles = 1.0;
  schedule_extra_check(make_lr_schedule(t, 100, 10),
                       {{10, 0.0003}, {30, 0.0001884425039850356}, {55, 2.9999999999999997e-05},
                        {80, 0.00018844250398503552}, {99, 0.0002996711467850762}});
  // transformers raises for both and for neither.
  t.lr_scheduler_kwargs.min_lr_rate = 0.1;
  CHECK(schedule_extra_error(t).find("needs exactly one of train.lr_scheduler_kwargs.min_lr and "
                                     "train.lr_scheduler_kwargs.min_lr_rate (both are set)") != std::string::npos);
  t.lr_scheduler_kwargs.min_lr.reset();
  t.lr_scheduler_kwargs.min_lr_rate.reset();
  CHECK(schedule_extra_error(t).find("(neither is set)") != std::string::npos);
}

TEST_CASE("warmup_stable_decay: warmup, stable, then cosine / linear / 1-sqrt decay to min_lr_ratio") {
  TrainConfig t = schedule_extra_train("warmup_stable_decay");
  CHECK(schedule_extra_error(t).find("needs train.lr_scheduler_kwargs.num_decay_steps") != std::string::npos);
  t.lr_scheduler_kwargs.num_decay_steps = 20;  // stable = 100 - 10 - 20 = 70
  schedule_extra_check(make_lr_schedule(t, 100, 10),
                       {{0, 0.0}, {5, 0.00015}, {10, 0.0003}, {79, 0.0003}, {80, 0.0003},
                        {85, 0.00025606601717798207}, {90, 0.00015}, {99, 1.8467489107293509e-06}, {100, 0.0},
                        {150, 0.0}});
  t.lr_scheduler_kwargs.decay_type = WsdDecayType::kOneMinusSqrt;
  schedule_extra_check(make_lr_schedule(t, 100, 10),
                       {{80, 0.0003}, {81, 0.0002329179606750063}, {85, 0.00015}, {90, 8.786796564403573e-05},
                        {99, 7.5961696557310995e-06}, {100, 0.0}});
  t.lr_scheduler_kwargs.decay_type = WsdDecayType::kLinear;
  t.lr_scheduler_kwargs.num_stable_steps = 30;
  t.lr_scheduler_kwargs.num_decay_steps = 40;
  t.lr_scheduler_kwargs.min_lr_ratio = 0.1;
  schedule_extra_check(make_lr_schedule(t, 100, 10),
                       {{0, 2.9999999999999997e-05}, {5, 0.000165}, {10, 0.0003}, {39, 0.0003}, {40, 0.0003},
                        {60, 0.000165}, {79, 3.6750000000000006e-05}, {80, 2.9999999999999997e-05},
                        {99, 2.9999999999999997e-05}});
  t.lr_scheduler_kwargs.num_stable_steps = -1;
  t.lr_scheduler_kwargs.num_decay_steps = 95;
  CHECK(schedule_extra_error(t).find("warmup (10) + num_decay_steps (95) exceed the run's 100 steps") !=
        std::string::npos);
  // A kwarg of another type is refused, as for the older types.
  TrainConfig cosine = schedule_extra_train("cosine");
  cosine.lr_scheduler_kwargs.num_decay_steps = 5;
  try {
    validate_lr_schedule_config(cosine, {"train.lr_scheduler_kwargs.num_decay_steps"});
    CHECK(false);
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("only applies when train.lr_scheduler_type is \"warmup_stable_decay\"") !=
          std::string::npos);
  }
}

TEST_CASE("WarmupCosineLR with total_num_steps below the warmup warns, as DeepSpeed does") {
  const shardtrain_test::ScratchDir scratch("schedule_extra");
  const std::string log = scratch.dir + "/log.txt";
  TrainConfig t = schedule_extra_train("WarmupCosineLR");
  t.lr_scheduler_kwargs.total_num_steps = 5;
  set_log_file(log);
  make_lr_schedule(t, 100, 10);
  t.lr_scheduler_kwargs.total_num_steps = 50;
  make_lr_schedule(t, 100, 10);  // above the warmup: no warning
  set_log_file("");
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  const std::string logged = text.str();
  CHECK(logged.find("WarmupCosineLR: total_num_steps (5) is less than the warmup (max(2, warmup_num_steps) = 10)") !=
        std::string::npos);
  CHECK(logged.find("total_num_steps (50)") == std::string::npos);
}

}  // namespace test_schedule_extra_test
