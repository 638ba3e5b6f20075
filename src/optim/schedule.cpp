#include "shardtrain/optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/text.h"

namespace shardtrain {

int64_t warmup_steps_for(int64_t num_training_steps, int64_t warmup_steps, double warmup_ratio) {
  if (num_training_steps < 0)
    throw Error("number of training steps must be >= 0, got " + std::to_string(num_training_steps));
  if (warmup_steps < 0) throw Error("train.warmup_steps must be >= 0, got " + std::to_string(warmup_steps));
  if (!(warmup_ratio >= 0.0 && warmup_ratio <= 1.0))
    throw Error("train.warmup_ratio must be in [0, 1], got " + std::to_string(warmup_ratio));
  if (warmup_steps > 0) return warmup_steps;
  return static_cast<int64_t>(std::ceil(static_cast<double>(num_training_steps) * warmup_ratio));
}

LinearWarmupDecay::LinearWarmupDecay(double base_lr, int64_t num_warmup_steps, int64_t num_training_steps)
    : base_lr_(base_lr), num_warmup_steps_(num_warmup_steps), num_training_steps_(num_training_steps) {
  if (!(base_lr >= 0)) throw Error("train.lr must be >= 0, got " + std::to_string(base_lr));
  if (num_warmup_steps < 0) throw Error("train.warmup_steps must be >= 0, got " + std::to_string(num_warmup_steps));
  if (num_training_steps < 0)
    throw Error("number of training steps must be >= 0, got " + std::to_string(num_training_steps));
}

// transformers' lr_lambda, same float64 expression order.
double LinearWarmupDecay::factor(int64_t step) const {
  if (step < num_warmup_steps_)
    return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, num_warmup_steps_));
  return std::max(0.0, static_cast<double>(num_training_steps_ - step) /
                           static_cast<double>(std::max<int64_t>(1, num_training_steps_ - num_warmup_steps_)));
}

// LambdaLR: base_lr * lambda(step).
double LinearWarmupDecay::lr(int64_t step) const { return base_lr_ * factor(step); }

}  // namespace shardtrain

// ---- the schedules by name --------------------------------------------------

namespace shardtrain {
namespace {

constexpr double kPi = 3.141592653589793;  // math.pi: the same double as M_PI

using Type = LrSchedulerType;

bool is_deepspeed_type(Type type) {
  return type == Type::kWarmupLR || type == Type::kWarmupDecayLR || type == Type::kWarmupCosineLR;
}

// Which types read which train.lr_scheduler_kwargs.* key.
struct KwargUse {
  const char* key;
  std::vector<Type> types;
};
const std::vector<KwargUse>& kwarg_uses() {
  static const std::vector<KwargUse> uses = {
      {"train.lr_scheduler_kwargs.num_cycles",
       {Type::kCosine, Type::kCosineWithRestarts, Type::kCosineWithMinLr, Type::kWarmupStableDecay}},
      {"train.lr_scheduler_kwargs.timescale", {Type::kInverseSqrt}},
      {"train.lr_scheduler_kwargs.min_lr", {Type::kCosineWithMinLr}},
      {"train.lr_scheduler_kwargs.min_lr_rate", {Type::kCosineWithMinLr}},
      {"train.lr_scheduler_kwargs.num_decay_steps", {Type::kWarmupStableDecay}},
      {"train.lr_scheduler_kwargs.num_stable_steps", {Type::kWarmupStableDecay}},
      {"train.lr_scheduler_kwargs.decay_type", {Type::kWarmupStableDecay}},
      {"train.lr_scheduler_kwargs.min_lr_ratio", {Type::kWarmupStableDecay}},
      {"train.lr_scheduler_kwargs.lr_end", {Type::kPolynomial}},
      {"train.lr_scheduler_kwargs.power", {Type::kPolynomial}},
      {"train.lr_scheduler_kwargs.warmup_min_lr", {Type::kWarmupLR, Type::kWarmupDecayLR}},
      {"train.lr_scheduler_kwargs.warmup_type", {Type::kWarmupLR, Type::kWarmupDecayLR, Type::kWarmupCosineLR}},
      {"train.lr_scheduler_kwargs.total_num_steps", {Type::kWarmupDecayLR, Type::kWarmupCosineLR}},
      {"train.lr_scheduler_kwargs.warmup_min_ratio", {Type::kWarmupCosineLR}},
      {"train.lr_scheduler_kwargs.cos_min_ratio", {Type::kWarmupCosineLR}},
  };
  return uses;
}

// Whether a kwarg differs from its default: a resolved config written back
// (config.toml) names every key, so only a changed value counts as set.
bool kwarg_changed(const LrSchedulerKwargs& k, const std::string& key) {
  const LrSchedulerKwargs d;
  if (key == "train.lr_scheduler_kwargs.num_cycles") return k.num_cycles.has_value();
  if (key == "train.lr_scheduler_kwargs.timescale") return k.timescale != d.timescale;
  if (key == "train.lr_scheduler_kwargs.min_lr") return k.min_lr.has_value();
  if (key == "train.lr_scheduler_kwargs.min_lr_rate") return k.min_lr_rate.has_value();
  if (key == "train.lr_scheduler_kwargs.num_decay_steps") return k.num_decay_steps != d.num_decay_steps;
  if (key == "train.lr_scheduler_kwargs.num_stable_steps") return k.num_stable_steps != d.num_stable_steps;
  if (key == "train.lr_scheduler_kwargs.decay_type") return k.decay_type != d.decay_type;
  if (key == "train.lr_scheduler_kwargs.min_lr_ratio") return k.min_lr_ratio != d.min_lr_ratio;
  if (key == "train.lr_scheduler_kwargs.lr_end") return k.lr_end != d.lr_end;
  if (key == "train.lr_scheduler_kwargs.power") return k.power != d.power;
  if (key == "train.lr_scheduler_kwargs.warmup_min_lr") return k.warmup_min_lr != d.warmup_min_lr;
  if (key == "train.lr_scheduler_kwargs.warmup_type") return k.warmup_type != d.warmup_type;
  if (key == "train.lr_scheduler_kwargs.total_num_steps") return k.total_num_steps != d.total_num_steps;
  if (key == "train.lr_scheduler_kwargs.warmup_min_ratio") return k.warmup_min_ratio != d.warmup_min_ratio;
  if (key == "train.lr_scheduler_kwargs.cos_min_ratio") return k.cos_min_ratio != d.cos_min_ratio;
  return false;
}

// `"a", "b" or "c"`.
std::string one_of(const std::vector<Type>& types) {
  std::string out;
  for (size_t i = 0; i < types.size(); ++i)
    out += (i == 0 ? "" : i + 1 == types.size() ? " or " : ", ") + ("\"" + std::string(enum_name(types[i])) + "\"");
  return out;
}

}  // namespace

void validate_lr_schedule_config(const TrainConfig& t, const std::set<std::string>& keys_set) {
  const Type type = t.lr_scheduler_type;
  const LrSchedulerKwargs& k = t.lr_scheduler_kwargs;
  for (const KwargUse& use : kwarg_uses()) {
    const bool applies = std::find(use.types.begin(), use.types.end(), type) != use.types.end();
    if (!applies && keys_set.count(use.key) && kwarg_changed(k, use.key))
      throw Error(std::string(use.key) + " only applies when train.lr_scheduler_type is " + one_of(use.types) +
                  " (it is \"" + enum_name(type) + "\")");
  }
  auto at_least_zero = [](const char* key, double value) {
    if (!(value >= 0 && std::isfinite(value)))
      throw Error(std::string(key) + " = " + shortest_text(value) + ": must be >= 0");
  };
  if (k.num_cycles) at_least_zero("train.lr_scheduler_kwargs.num_cycles", *k.num_cycles);
  at_least_zero("train.lr_scheduler_kwargs.lr_end", k.lr_end);
  at_least_zero("train.lr_scheduler_kwargs.power", k.power);
  at_least_zero("train.lr_scheduler_kwargs.warmup_min_lr", k.warmup_min_lr);
  at_least_zero("train.lr_scheduler_kwargs.total_num_steps", static_cast<double>(k.total_num_steps));
  at_least_zero("train.lr_scheduler_kwargs.warmup_min_ratio", k.warmup_min_ratio);
  at_least_zero("train.lr_scheduler_kwargs.cos_min_ratio", k.cos_min_ratio);
  at_least_zero("train.lr_scheduler_kwargs.timescale", static_cast<double>(k.timescale));
  if (k.min_lr) at_least_zero("train.lr_scheduler_kwargs.min_lr", *k.min_lr);
  if (k.min_lr_rate) at_least_zero("train.lr_scheduler_kwargs.min_lr_rate", *k.min_lr_rate);
  at_least_zero("train.lr_scheduler_kwargs.num_decay_steps", static_cast<double>(k.num_decay_steps));
  at_least_zero("train.lr_scheduler_kwargs.min_lr_ratio", k.min_lr_ratio);
  if (k.num_stable_steps < -1)
    throw Error("train.lr_scheduler_kwargs.num_stable_steps = " + std::to_string(k.num_stable_steps) +
                ": must be >= 0, or -1 for the run's steps minus warmup and decay");
  // transformers' get_cosine_with_min_lr_schedule_with_warmup raises the same two ValueErrors.
  if (type == Type::kCosineWithMinLr && k.min_lr.has_value() == k.min_lr_rate.has_value())
    throw Error(std::string("train.lr_scheduler_type = \"cosine_with_min_lr\" needs exactly one of "
                            "train.lr_scheduler_kwargs.min_lr and train.lr_scheduler_kwargs.min_lr_rate (") +
                (k.min_lr ? "both are set)" : "neither is set)"));
  if (type == Type::kCosineWithMinLr && k.min_lr && !(t.lr > 0))
    throw Error("train.lr_scheduler_kwargs.min_lr needs train.lr > 0 (min_lr_rate = min_lr / train.lr)");
  // transformers' get_scheduler: "warmup_stable_decay requires `num_decay_steps`".
  if (type == Type::kWarmupStableDecay && k.num_decay_steps <= 0)
    throw Error("train.lr_scheduler_type = \"warmup_stable_decay\" needs train.lr_scheduler_kwargs.num_decay_steps "
                "(> 0), the steps of its decay");
  // transformers raises the same ValueError in get_polynomial_decay_schedule_with_warmup.
  if (type == Type::kPolynomial && !(t.lr > k.lr_end))
    throw Error("train.lr_scheduler_kwargs.lr_end = " + shortest_text(k.lr_end) + " must be smaller than train.lr = " +
                shortest_text(t.lr) + " (polynomial decays from train.lr to lr_end)");
  // transformers' get_constant_schedule ignores the warmup; a warmup set here was meant to happen.
  if (type == Type::kConstant && (t.warmup_steps > 0 || t.warmup_ratio > 0))
    throw Error("train.lr_scheduler_type = \"constant\" has no warmup (transformers' get_constant_schedule ignores "
                "it), but train.warmup_steps or train.warmup_ratio is set: use \"constant_with_warmup\", or set the "
                "warmup to 0");
}

LrSchedule make_lr_schedule(const TrainConfig& train, int64_t num_training_steps, int64_t num_warmup_steps) {
  return LrSchedule(train, num_training_steps, num_warmup_steps);
}

LrSchedule::LrSchedule(const TrainConfig& train, int64_t num_training_steps, int64_t num_warmup_steps)
    : type_(train.lr_scheduler_type),
      base_lr_(train.lr),
      num_warmup_steps_(num_warmup_steps),
      num_training_steps_(num_training_steps),
      kwargs_(train.lr_scheduler_kwargs),
      linear_(train.lr, num_warmup_steps, num_training_steps) {
  validate_lr_schedule_config(train, {});
  if (type_ == Type::kCosine) num_cycles_ = kwargs_.num_cycles.value_or(0.5);
  if (type_ == Type::kCosineWithRestarts) num_cycles_ = kwargs_.num_cycles.value_or(1.0);
  if (type_ == Type::kCosineWithMinLr || type_ == Type::kWarmupStableDecay)
    num_cycles_ = kwargs_.num_cycles.value_or(0.5);
  if (type_ == Type::kCosineWithMinLr)
    min_lr_rate_ = kwargs_.min_lr ? *kwargs_.min_lr / base_lr_ : kwargs_.min_lr_rate.value_or(0.0);
  if (type_ == Type::kInverseSqrt)
    timescale_ = kwargs_.timescale > 0 ? kwargs_.timescale : num_warmup_steps > 0 ? num_warmup_steps : 10000;
  if (type_ == Type::kWarmupStableDecay) {
    stable_steps_ = kwargs_.num_stable_steps >= 0 ? kwargs_.num_stable_steps
                                                  : num_training_steps - num_warmup_steps - kwargs_.num_decay_steps;
    if (stable_steps_ < 0)
      throw Error(str_format("warmup_stable_decay: warmup (%lld) + num_decay_steps (%lld) exceed the run's %lld steps; "
                             "set train.lr_scheduler_kwargs.num_decay_steps smaller (or num_stable_steps)",
                             static_cast<long long>(num_warmup_steps),
                             static_cast<long long>(kwargs_.num_decay_steps),
                             static_cast<long long>(num_training_steps)));
  }
  if (is_deepspeed_type(type_)) {
    deepspeed_warmup_steps_ = std::max<int64_t>(2, num_warmup_steps);
    deepspeed_total_steps_ = kwargs_.total_num_steps > 0 ? kwargs_.total_num_steps : num_training_steps;
    // DeepSpeed's WarmupCosineLR warns the same way: past the warmup its cosine
    // runs backwards (total - warmup < 0) and the lr swings.
    if (type_ == Type::kWarmupCosineLR && deepspeed_total_steps_ < deepspeed_warmup_steps_)
      log_warn("WarmupCosineLR: total_num_steps (%lld) is less than the warmup (max(2, warmup_num_steps) = %lld): "
               "after the warmup the cosine runs backwards and the learning rate swings, as in DeepSpeed; set "
               "train.lr_scheduler_kwargs.total_num_steps above the warmup, or 0 for the run's %lld steps",
               static_cast<long long>(deepspeed_total_steps_), static_cast<long long>(deepspeed_warmup_steps_),
               static_cast<long long>(num_training_steps));
    // DeepSpeed divides by total_num_steps - warmup once the warmup is over; the
    // last update, k = T - 1, runs at iteration T - 2.
    if (type_ == Type::kWarmupCosineLR && deepspeed_total_steps_ == deepspeed_warmup_steps_ &&
        num_training_steps - 2 >= deepspeed_warmup_steps_)
      throw Error(str_format("WarmupCosineLR: total_num_steps (%lld) equals the warmup (max(2, warmup_num_steps) = "
                             "%lld), and DeepSpeed divides by their difference after the warmup; set "
                             "train.lr_scheduler_kwargs.total_num_steps larger, or 0 for the run's %lld steps",
                             static_cast<long long>(deepspeed_total_steps_),
                             static_cast<long long>(deepspeed_warmup_steps_),
                             static_cast<long long>(num_training_steps)));
  }
}

double LrSchedule::lr(int64_t step) const {
  if (is_deepspeed_type(type_)) return deepspeed_lr(step - 1);
  return transformers_lr(step);
}

// Each line is the float64 expression of transformers' lr_lambda, in its
// order, times base_lr as LambdaLR multiplies.
double LrSchedule::transformers_lr(int64_t s) const {
  const int64_t W = num_warmup_steps_, T = num_training_steps_;
  const double base = base_lr_;
  if (type_ == Type::kLinear) return linear_.lr(s);
  if (type_ == Type::kConstant) return base;
  if (type_ == Type::kConstantWithWarmup) {
    if (s < W) return base * (static_cast<double>(s) / std::max(1.0, static_cast<double>(W)));
    return base * 1.0;
  }
  if (type_ == Type::kWarmupStableDecay) return base * wsd_factor(s);
  if (s < W) return base * (static_cast<double>(s) / static_cast<double>(std::max<int64_t>(1, W)));
  if (type_ == Type::kInverseSqrt) {
    const double shift = static_cast<double>(timescale_ - W);
    return base * (1.0 / std::sqrt((static_cast<double>(s) + shift) / static_cast<double>(timescale_)));
  }
  if (type_ == Type::kPolynomial) {
    const double lr_end = kwargs_.lr_end;
    if (s > T) return base * (lr_end / base);
    // s == W == T: transformers divides 0 by 0 here, but the run's last update is T - 1 < W.
    if (T == W) return base * (lr_end / base);
    const double lr_range = base - lr_end;
    const int64_t decay_steps = T - W;
    const double pct_remaining = 1.0 - static_cast<double>(s - W) / static_cast<double>(decay_steps);
    const double decay = lr_range * std::pow(pct_remaining, kwargs_.power) + lr_end;
    return base * (decay / base);
  }
  const double progress = static_cast<double>(s - W) / static_cast<double>(std::max<int64_t>(1, T - W));
  if (type_ == Type::kCosine) return base * std::max(0.0, 0.5 * (1.0 + std::cos(kPi * num_cycles_ * 2.0 * progress)));
  if (type_ == Type::kCosineWithMinLr) {
    double factor = 0.5 * (1.0 + std::cos(kPi * num_cycles_ * 2.0 * progress));
    factor = factor * (1 - min_lr_rate_) + min_lr_rate_;
    return base * std::max(0.0, factor);
  }
  ST_ASSERT(type_ == Type::kCosineWithRestarts, std::string("unknown schedule type ") + enum_name(type_));
  if (progress >= 1.0) return base * 0.0;
  // Python's % and fmod agree for the non-negative operands here.
  return base * std::max(0.0, 0.5 * (1.0 + std::cos(kPi * std::fmod(num_cycles_ * progress, 1.0))));
}

// transformers' _get_wsd_scheduler_lambda with warmup_type "linear".
double LrSchedule::wsd_factor(int64_t s) const {
  const int64_t W = num_warmup_steps_, S = stable_steps_, D = kwargs_.num_decay_steps;
  const double floor_ratio = kwargs_.min_lr_ratio;
  if (s < W) {
    const double progress = static_cast<double>(s) / static_cast<double>(std::max<int64_t>(1, W));
    return std::max(0.0, progress * (1.0 - floor_ratio) + floor_ratio);
  }
  if (s < W + S) return 1.0;
  if (s < W + S + D) {
    const double progress = static_cast<double>(s - W - S) / static_cast<double>(std::max<int64_t>(1, D));
    double factor;
    if (kwargs_.decay_type == WsdDecayType::kLinear) factor = 1.0 - progress;
    else if (kwargs_.decay_type == WsdDecayType::kCosine) factor = 0.5 * (1.0 + std::cos(kPi * num_cycles_ * 2.0 * progress));
    else factor = 1.0 - std::sqrt(progress);
    return std::max(0.0, factor * (1.0 - floor_ratio) + floor_ratio);
  }
  return floor_ratio;
}

double LrSchedule::deepspeed_warmup_gamma(int64_t i) const {
  const int64_t Wd = deepspeed_warmup_steps_;
  if (kwargs_.warmup_type == WarmupType::kLog) {
    const double inverse_log_warm_up = 1.0 / std::log(static_cast<double>(Wd));
    return inverse_log_warm_up * std::log(static_cast<double>(i + 1));
  }
  return static_cast<double>(i) / static_cast<double>(Wd);
}

// DeepSpeed's get_lr at last_batch_iteration = i, in its float64 order.
double LrSchedule::deepspeed_lr(int64_t i) const {
  const int64_t Wd = deepspeed_warmup_steps_, Td = deepspeed_total_steps_;
  if (type_ == Type::kWarmupCosineLR) {
    if (i < 0) return 0.0;
    double ratio;
    if (i < Wd) {
      const double ratio_delta = 1.0 - kwargs_.warmup_min_ratio;
      ratio = kwargs_.warmup_min_ratio + deepspeed_warmup_gamma(i) * ratio_delta;
    } else {
      const int64_t real_last_step = i - Wd + 1;
      const int64_t real_total_steps = Td - Wd;
      const double ratio_delta = 1.0 - kwargs_.cos_min_ratio;
      ratio = (1 + std::cos(kPi * static_cast<double>(real_last_step) / static_cast<double>(real_total_steps))) / 2;
      ratio = std::max(0.0, kwargs_.cos_min_ratio + ratio_delta * ratio);
    }
    return base_lr_ * ratio;
  }
  const double min_lr = kwargs_.warmup_min_lr;
  if (i < 0) return min_lr;
  const double delta_lr = base_lr_ - min_lr;
  double gamma;
  if (i < Wd) gamma = deepspeed_warmup_gamma(i);
  else if (type_ == Type::kWarmupLR) gamma = 1.0;
  else
    gamma = std::max(0.0, static_cast<double>(Td - i) / std::max(1.0, static_cast<double>(Td - Wd)));
  return min_lr + delta_lr * gamma;
}

std::string LrSchedule::describe() const {
  const std::string base = shortest_text(base_lr_);
  const std::string T = std::to_string(num_training_steps_), W = std::to_string(num_warmup_steps_);
  const std::string warmup = num_warmup_steps_ > 0 ? "linear warmup from 0 to " + base + " over " + W + " steps, then "
                                                   : "no warmup, ";
  if (type_ == Type::kLinear) return "linear (transformers): " + warmup + "linear decay to 0 at step " + T;
  if (type_ == Type::kCosine)
    return "cosine (transformers): " + warmup + "cosine with num_cycles " + shortest_text(num_cycles_) +
           " over the steps up to " + T;
  if (type_ == Type::kCosineWithRestarts)
    return "cosine_with_restarts (transformers): " + warmup + shortest_text(num_cycles_) +
           " cosine cycles with hard restarts, 0 at step " + T;
  if (type_ == Type::kPolynomial)
    return "polynomial (transformers): " + warmup + "decay with power " + shortest_text(kwargs_.power) + " to lr_end " +
           shortest_text(kwargs_.lr_end) + " at step " + T;
  if (type_ == Type::kConstant) return "constant (transformers): " + base + " at every step";
  if (type_ == Type::kInverseSqrt)
    return "inverse_sqrt (transformers): " + warmup + base + " / sqrt((step + " + std::to_string(timescale_ - num_warmup_steps_) +
           ") / " + std::to_string(timescale_) + ")";
  if (type_ == Type::kCosineWithMinLr)
    return "cosine_with_min_lr (transformers): " + warmup + "cosine with num_cycles " + shortest_text(num_cycles_) +
           " down to " + shortest_text(min_lr_rate_) + " x " + base + " over the steps up to " + T;
  if (type_ == Type::kWarmupStableDecay)
    return "warmup_stable_decay (transformers): " + warmup + std::to_string(stable_steps_) + " steps at " + base +
           ", then " + enum_name(kwargs_.decay_type) + " decay over " + std::to_string(kwargs_.num_decay_steps) +
           " steps to " + shortest_text(kwargs_.min_lr_ratio) + " x " + base;
  if (type_ == Type::kConstantWithWarmup) return "constant_with_warmup (transformers): " + warmup + base;
  const std::string ds_warmup = std::string(enum_name(kwargs_.warmup_type)) + " warmup over " + std::to_string(deepspeed_warmup_steps_) +
                                " steps (max(2, warmup_num_steps " + W + "))";
  const std::string total = std::to_string(deepspeed_total_steps_) +
                            (kwargs_.total_num_steps > 0 ? " (total_num_steps; the run has " + T + ")" : "");
  if (type_ == Type::kWarmupLR)
    return "WarmupLR (DeepSpeed): " + ds_warmup + " from " + shortest_text(kwargs_.warmup_min_lr) + " to " + base +
           ", then constant";
  if (type_ == Type::kWarmupDecayLR)
    return "WarmupDecayLR (DeepSpeed): " + ds_warmup + " from " + shortest_text(kwargs_.warmup_min_lr) + " to " + base +
           ", then linear decay to 0 at step " + total;
  return "WarmupCosineLR (DeepSpeed): " + ds_warmup + " from " + shortest_text(kwargs_.warmup_min_ratio) + " x " +
         base + " to " + base + ", then cosine to " + shortest_text(kwargs_.cos_min_ratio) + " x " + base +
         " at step " + total;
}

}  // namespace shardtrain
