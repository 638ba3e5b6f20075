// Learning-rate schedules by name (optim/schedule.h): every transformers type
// and every DeepSpeed type at a handful of steps against values worked out from
// the libraries' formulas with python3's math module
// (tests/fixtures/make_schedule_values.py prints them; each table below names
// its formula), `linear` bit-identical to LinearWarmupDecay, and the config
// checks.
//
// Tolerance: 1e-15 relative. The Python values call the same glibc cos / log /
// pow the C++ does and follow the same float64 expression order, so on this
// machine they agree to the bit; 1e-15 (about 4 ulp) leaves room for another
// libm's last bit and nothing more.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "shardtrain/core/check.h"
#include "shardtrain/core/run_config.h"
#include "shardtrain/optim/schedule.h"

namespace test_schedule_test {

using shardtrain::Error;
using shardtrain::LinearWarmupDecay;
using shardtrain::LrSchedulerType;
using shardtrain::WarmupType;
using shardtrain::LrSchedule;
using shardtrain::make_lr_schedule;
using shardtrain::TrainConfig;
using shardtrain::validate_lr_schedule_config;

using Table = std::vector<std::pair<int64_t, double>>;

TrainConfig train_with(const std::string& type, double lr) {
  TrainConfig t;
  t.lr_scheduler_type = shardtrain::parse_enum<LrSchedulerType>(type, "train.lr_scheduler_type");
  t.lr = lr;
  return t;
}

void check_table(const LrSchedule& schedule, const Table& expected) {
  for (const auto& [step, lr] : expected) {
    INFO(shardtrain::enum_name(schedule.type()), " step ", step);
    if (lr == 0.0)
      CHECK(schedule.lr(step) == 0.0);
    else
      CHECK(schedule.lr(step) == doctest::Approx(lr).epsilon(1e-15).scale(0));  // relative: no absolute floor
  }
}

std::string error_of_schedule(const TrainConfig& t, const std::set<std::string>& keys = {}) {
  try {
    validate_lr_schedule_config(t, keys);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// ---- transformers: base 3e-4, W = 10 warmup steps, T = 100 training steps ----
// warmup (every type but constant): lambda = s / max(1, W) for s < W

TEST_CASE("linear is LinearWarmupDecay, bit for bit") {
  const TrainConfig t = train_with("linear", 3e-4);
  for (const auto& [W, T] : std::vector<std::pair<int64_t, int64_t>>{{10, 100}, {0, 37}, {100, 345}, {5, 5}}) {
    const LrSchedule schedule = make_lr_schedule(t, T, W);
    const LinearWarmupDecay reference(3e-4, W, T);
    for (int64_t s = 0; s <= T + 3; ++s) CHECK(schedule.lr(s) == reference.lr(s));
  }
}

TEST_CASE("cosine: max(0, 0.5 (1 + cos(pi num_cycles 2 p))), p = (s - W) / max(1, T - W)") {
  TrainConfig t = train_with("cosine", 3e-4);
  // num_cycles unset = 0.5; the middle of the decay (s = 55) is half the peak; past T the cosine turns up again.
  check_table(make_lr_schedule(t, 100, 10), {{0, 0.0},
                                             {5, 0.00015},
                                             {10, 0.0003},
                                             {37, 0.00023816778784387094},
                                             {55, 0.00015},
                                             {99, 9.137594713563568e-08},
                                             {100, 0.0},
                                             {120, 3.5093333532153296e-05}});
  t.lr_scheduler_kwargs.num_cycles = 2.0;
  check_table(make_lr_schedule(t, 100, 10), {{10, 0.0003},
                                             {21, 0.00015523492450537517},
                                             {32, 3.653924610263703e-07},
                                             {55, 0.0003},
                                             {77, 3.653924610263537e-07},
                                             {99, 0.0002985402103112355}});
}

TEST_CASE("cosine_with_restarts: 0 once p >= 1, else max(0, 0.5 (1 + cos(pi ((num_cycles p) mod 1))))") {
  TrainConfig t = train_with("cosine_with_restarts", 3e-4);
  // num_cycles unset = 1: one cosine, as cosine with 0.5 cycles; 0 past the end.
  check_table(make_lr_schedule(t, 100, 10), {{3, 8.999999999999999e-05},
                                             {10, 0.0003},
                                             {40, 0.000225},
                                             {99, 9.137594713563568e-08},
                                             {100, 0.0},
                                             {130, 0.0}});
  t.lr_scheduler_kwargs.num_cycles = 3.0;  // restarts at s = 40 and 70 back to the peak
  check_table(make_lr_schedule(t, 100, 10), {{10, 0.0003},
                                             {39, 8.217156947589898e-07},
                                             {40, 0.0003},
                                             {41, 0.000299178284305241},
                                             {70, 0.0003},
                                             {71, 0.000299178284305241},
                                             {99, 8.217156947589898e-07}});
}

TEST_CASE("polynomial: ((base - lr_end) (1 - (s - W) / (T - W))^power + lr_end) / base, lr_end / base past T") {
  TrainConfig t = train_with("polynomial", 3e-4);
  // lr_end 1e-7, power 1 (transformers' defaults): linear to lr_end, then lr_end.
  check_table(make_lr_schedule(t, 100, 10), {{0, 0.0},
                                             {7, 0.00020999999999999998},
                                             {10, 0.0003},
                                             {50, 0.00016671111111111114},
                                             {99, 3.43222222222221e-06},
                                             {100, 9.999999999999998e-08},
                                             {101, 9.999999999999998e-08},
                                             {150, 9.999999999999998e-08}});
  t.lr_scheduler_kwargs.lr_end = 1e-5;
  t.lr_scheduler_kwargs.power = 2.0;
  check_table(make_lr_schedule(t, 100, 10), {{10, 0.0003},
                                             {33, 0.00017071728395061722},
                                             {50, 9.950617283950617e-05},
                                             {99, 1.0035802469135803e-05},
                                             {100, 1e-05},
                                             {101, 1e-05}});
}

TEST_CASE("constant and constant_with_warmup") {
  const LrSchedule constant = make_lr_schedule(train_with("constant", 3e-4), 100, 0);
  for (int64_t s : {0, 1, 50, 100, 1000}) CHECK(constant.lr(s) == 3e-4);
  // constant_with_warmup: s / max(1.0, W) during the warmup, then 1.
  check_table(make_lr_schedule(train_with("constant_with_warmup", 3e-4), 100, 10),
              {{0, 0.0}, {3, 8.999999999999999e-05}, {9, 0.00027}, {10, 0.0003}, {100, 0.0003}});
}

// ---- DeepSpeed: update k runs at iteration i = k - 1; Wd = max(2, W) ----------
// gamma during the warmup (i < Wd): log ln(i + 1) / ln(Wd), linear i / Wd.

TEST_CASE("WarmupLR: min + (max - min) gamma, then max") {
  TrainConfig t = train_with("WarmupLR", 5e-5);
  // warmup_type log (DeepSpeed's default), warmup 50, min 0: updates 0 and 1 both run at 0.
  check_table(make_lr_schedule(t, 345, 50), {{0, 0.0},
                                             {1, 0.0},
                                             {2, 8.859191006777897e-06},
                                             {11, 3.064776548439465e-05},
                                             {50, 5e-05},
                                             {51, 5e-05},
                                             {52, 5e-05},
                                             {300, 5e-05}});
  t.lr_scheduler_kwargs.warmup_type = WarmupType::kLinear;
  t.lr_scheduler_kwargs.warmup_min_lr = 1e-6;
  check_table(make_lr_schedule(t, 345, 50), {{0, 1e-06},
                                             {1, 1e-06},
                                             {2, 1.98e-06},
                                             {26, 2.5500000000000003e-05},
                                             {50, 4.902e-05},
                                             {51, 5e-05},
                                             {52, 5e-05}});
  // No warmup asked for: DeepSpeed still warms up over max(2, 0) = 2 iterations.
  t.lr_scheduler_kwargs.warmup_min_lr = 0.0;
  check_table(make_lr_schedule(t, 345, 0), {{0, 0.0}, {1, 0.0}, {2, 2.5e-05}, {3, 5e-05}, {10, 5e-05}});
}

TEST_CASE("WarmupDecayLR: the warmup, then max(0, (Td - i) / max(1, Td - Wd))") {
  TrainConfig t = train_with("WarmupDecayLR", 5e-5);
  t.lr_scheduler_kwargs.warmup_type = WarmupType::kLinear;
  // total_num_steps 0 = the run's 345 (transformers' "auto"); the last update still runs above 0.
  check_table(make_lr_schedule(t, 345, 50), {{0, 0.0},
                                             {1, 0.0},
                                             {26, 2.5e-05},
                                             {51, 5e-05},
                                             {52, 4.9830508474576276e-05},
                                             {200, 2.4745762711864408e-05},
                                             {344, 3.389830508474576e-07}});
  // A fixed total_num_steps 300 in a 345-step run: warmup_min_lr once the decay is over.
  t.lr_scheduler_kwargs.warmup_type = WarmupType::kLog;
  t.lr_scheduler_kwargs.warmup_min_lr = 1e-6;
  t.lr_scheduler_kwargs.total_num_steps = 300;
  check_table(make_lr_schedule(t, 345, 50), {{2, 9.68200718664234e-06},
                                             {40, 4.720501796660584e-05},
                                             {51, 5e-05},
                                             {150, 3.0596e-05},
                                             {300, 1.196e-06},
                                             {301, 1e-06},
                                             {302, 1e-06},
                                             {340, 1e-06}});
}

TEST_CASE("WarmupCosineLR: base (min_ratio + gamma (1 - min_ratio)), then cosine to cos_min_ratio") {
  TrainConfig t = train_with("WarmupCosineLR", 5e-5);
  // log warmup, cos_min_ratio 0.0001, total auto (345); update 0 runs at lr 0 (DeepSpeed's get_lr before a step).
  check_table(make_lr_schedule(t, 345, 50), {{0, 0.0},
                                             {1, 0.0},
                                             {2, 8.859191006777897e-06},
                                             {30, 4.347108103585803e-05},
                                             {51, 4.999858251591879e-05},
                                             {52, 4.999433022443211e-05},
                                             {200, 2.433705351535923e-05},
                                             {344, 6.417484081212631e-09}});
  // ratio = (1 + cos(pi (i - Wd + 1) / (Td - Wd))) / 2, ratio = max(0, cos_min + (1 - cos_min) ratio);
  // past Td = 200 the cosine turns up again, as DeepSpeed's does.
  t.lr_scheduler_kwargs.warmup_type = WarmupType::kLinear;
  t.lr_scheduler_kwargs.warmup_min_ratio = 0.1;
  t.lr_scheduler_kwargs.cos_min_ratio = 0.01;
  t.lr_scheduler_kwargs.total_num_steps = 200;
  check_table(make_lr_schedule(t, 345, 50), {{0, 0.0},
                                             {1, 5e-06},
                                             {2, 5.9e-06},
                                             {30, 3.1100000000000004e-05},
                                             {51, 4.9994571916002434e-05},
                                             {52, 4.997829004494675e-05},
                                             {150, 1.2874999999999996e-05},
                                             {201, 5.054280839975739e-07},
                                             {202, 5.217099550532551e-07},
                                             {300, 3.7624999999999986e-05}});
  // total_num_steps equal to the warmup: DeepSpeed divides by zero once the warmup is over.
  t.lr_scheduler_kwargs.total_num_steps = 50;
  CHECK_THROWS_WITH_AS(make_lr_schedule(t, 345, 50), doctest::Contains("divides by their difference"), Error);
}

TEST_CASE("describe() names the type, the library and the numbers") {
  TrainConfig t = train_with("cosine", 3e-4);
  CHECK(make_lr_schedule(t, 345, 10).describe() ==
        "cosine (transformers): linear warmup from 0 to 0.0003 over 10 steps, then cosine with num_cycles 0.5 over "
        "the steps up to 345");
  t = train_with("WarmupDecayLR", 5e-5);
  t.lr_scheduler_kwargs.total_num_steps = 300;
  CHECK(make_lr_schedule(t, 345, 0).describe() ==
        "WarmupDecayLR (DeepSpeed): log warmup over 2 steps (max(2, warmup_num_steps 0)) from 0 to 5e-05, then "
        "linear decay to 0 at step 300 (total_num_steps; the run has 345)");
}

TEST_CASE("config checks name the key") {
  TrainConfig t = train_with("cosine", 3e-4);
  CHECK(error_of_schedule(t) == "(no error)");
  CHECK_THROWS_WITH_AS(train_with("cosine_annealing", 3e-4),
                       "train.lr_scheduler_type = 'cosine_annealing': allowed values are \"linear\", \"cosine\", "
                       "\"cosine_with_restarts\", \"polynomial\", \"constant\", \"constant_with_warmup\", "
                       "\"inverse_sqrt\", \"cosine_with_min_lr\", \"warmup_stable_decay\", "
                       "\"WarmupLR\", \"WarmupDecayLR\", \"WarmupCosineLR\"",
                       Error);

  // A kwarg the type does not read, once set to something else than its default.
  t = train_with("linear", 3e-4);
  t.lr_scheduler_kwargs.power = 2.0;
  CHECK(error_of_schedule(t, {"train.lr_scheduler_kwargs.power"}) ==
        "train.lr_scheduler_kwargs.power only applies when train.lr_scheduler_type is \"polynomial\" (it is "
        "\"linear\")");
  CHECK(error_of_schedule(t) == "(no error)");  // not set by the user: a default-valued field is not an error
  t.lr_scheduler_kwargs.power = 1.0;            // a written-back config names every key with its default
  CHECK(error_of_schedule(t, {"train.lr_scheduler_kwargs.power"}) == "(no error)");
  t.lr_scheduler_kwargs.num_cycles = 2.0;
  CHECK(error_of_schedule(t, {"train.lr_scheduler_kwargs.num_cycles"}).find(
            "only applies when train.lr_scheduler_type is \"cosine\", \"cosine_with_restarts\", "
            "\"cosine_with_min_lr\" or \"warmup_stable_decay\"") !=
        std::string::npos);

  t = train_with("polynomial", 1e-7);  // transformers: lr_end must be smaller than the initial lr
  CHECK(error_of_schedule(t).find("train.lr_scheduler_kwargs.lr_end = 1e-07 must be smaller than train.lr") == 0);
  t = train_with("cosine", 3e-4);
  t.lr_scheduler_kwargs.num_cycles = -1.0;
  CHECK(error_of_schedule(t) == "train.lr_scheduler_kwargs.num_cycles = -1: must be >= 0");
  t = train_with("constant", 3e-4);
  t.warmup_steps = 10;
  CHECK(error_of_schedule(t).find("use \"constant_with_warmup\"") != std::string::npos);
  CHECK_THROWS_AS(make_lr_schedule(t, 100, 10), Error);
}

}  // namespace test_schedule_test
