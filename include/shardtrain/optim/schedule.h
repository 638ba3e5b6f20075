// Learning-rate schedules: transformers' lr_scheduler_type names and DeepSpeed's
// scheduler types, each computing in float64 the value its library puts in
// param_groups[i]["lr"].
//
//   const int64_t warmup = warmup_steps_for(total, t.warmup_steps, t.warmup_ratio);
//   const LrSchedule schedule = make_lr_schedule(config.train, total, warmup);
//   log_info("%s", schedule.describe().c_str());
//   ... optimizer update k (0-based) runs with schedule.lr(k) ...
//
// Which step for which optimizer update: pass the number of optimizer updates
// done so far (not micro-batches: with gradient accumulation one update covers
// several). HF/Accelerate call scheduler.step() after optimizer.step(), so
// update k runs with the lr LambdaLR has after k scheduler steps; the DeepSpeed
// engine also steps its scheduler after each update, but its schedulers start at
// last_batch_iteration = -1, so update k runs with DeepSpeed's value at
// iteration k - 1 (update 0 at warmup_min_lr, or 0 for WarmupCosineLR). lr(k)
// accounts for both.
//
// transformers (optimization.py, get_*_schedule_with_warmup; base = train.lr,
// W = warmup steps, T = training steps, s = step; every schedule is
// base * lambda(s), LambdaLR's product):
//   warmup (all but constant)   lambda = s / max(1, W)                       s < W
//   linear                      lambda = max(0, (T - s) / max(1, T - W))
//   cosine                      p = (s - W) / max(1, T - W)
//                               lambda = max(0, 0.5 (1 + cos(pi * num_cycles * 2 * p)))     num_cycles 0.5
//   cosine_with_restarts        lambda = 0 if p >= 1, else
//                               max(0, 0.5 (1 + cos(pi * ((num_cycles * p) mod 1))))       num_cycles 1
//   polynomial                  lambda = (lr_end / base) if s > T, else
//                               ((base - lr_end) (1 - (s - W) / (T - W))^power + lr_end) / base
//                                                                            lr_end 1e-7, power 1
//   constant                    lambda = 1 (no warmup: train.warmup_* must be 0)
//   constant_with_warmup        lambda = 1 after the warmup
//   inverse_sqrt                lambda = 1 / sqrt((s + timescale - W) / timescale)      timescale = W, or 10000 if W = 0
//   cosine_with_min_lr          f = 0.5 (1 + cos(pi * num_cycles * 2 * p)); lambda = max(0, f (1 - r) + r)
//                               r = min_lr / base or min_lr_rate (exactly one given)     num_cycles 0.5
//   warmup_stable_decay         S = num_stable_steps or T - W - D, D = num_decay_steps (required), m = min_lr_ratio:
//                               s < W: max(0, s / max(1, W) (1 - m) + m); s < W + S: 1;
//                               s < W + S + D: q = (s - W - S) / max(1, D), f = 1 - q (linear) |
//                               0.5 (1 + cos(pi * num_cycles * 2 * q)) (cosine) | 1 - sqrt(q) (1-sqrt),
//                               max(0, f (1 - m) + m); after: m. (transformers' warmup_type: linear only)
// reduce_lr_on_plateau (torch's ReduceLROnPlateau on the eval metric) is not implemented.
//
// DeepSpeed (deepspeed/runtime/lr_schedules.py; i = k - 1 the scheduler's
// last_batch_iteration, Wd = max(2, W), Td = total_num_steps or T):
//   warmup gamma (i < Wd)       log: ln(i + 1) / ln(Wd)       linear: i / Wd
//   WarmupLR                    lr = min + (base - min) * gamma, gamma = 1 after the warmup
//                               (min = warmup_min_lr, base = warmup_max_lr = train.lr)
//   WarmupDecayLR               as WarmupLR, then gamma = max(0, (Td - i) / max(1, Td - Wd))
//   WarmupCosineLR              warmup: ratio = warmup_min_ratio + gamma (1 - warmup_min_ratio)
//                               after:  ratio = max(0, cos_min_ratio + (1 - cos_min_ratio) *
//                                               (1 + cos(pi (i - Wd + 1) / (Td - Wd))) / 2)
//                               lr = base * ratio; lr = 0 at i = -1
//
// Warmup from a ratio: transformers' TrainingArguments.get_warmup_steps uses
//   warmup_steps > 0 ? warmup_steps : ceil(total * warmup_ratio)
// and so does warmup_steps_for(); for DeepSpeed types that is warmup_num_steps
// ("auto" in a DeepSpeed JSON is filled with it, as transformers fills it).
//
// LinearWarmupDecay is `linear` on its own (the float64 expression order of
// transformers' lr_lambda); LrSchedule uses it for `linear`.
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include "shardtrain/core/run_config.h"

namespace shardtrain {

// Number of warmup steps HF would use: warmup_steps if > 0, else
// ceil(num_training_steps * warmup_ratio). Throws shardtrain::Error for negative
// counts or a ratio outside [0, 1] (naming train.warmup_steps / train.warmup_ratio).
int64_t warmup_steps_for(int64_t num_training_steps, int64_t warmup_steps, double warmup_ratio);

class LinearWarmupDecay {
 public:
  // Throws shardtrain::Error if base_lr < 0 or a count is negative.
  LinearWarmupDecay(double base_lr, int64_t num_warmup_steps, int64_t num_training_steps);

  // lr of optimizer step `step` (0-based), see the file comment. Steps past
  // num_training_steps give 0.
  double lr(int64_t step) const;
  // The multiplier lr(step) / base_lr (HF's lr_lambda).
  double factor(int64_t step) const;

  double base_lr() const { return base_lr_; }
  int64_t num_warmup_steps() const { return num_warmup_steps_; }
  int64_t num_training_steps() const { return num_training_steps_; }

 private:
  double base_lr_;
  int64_t num_warmup_steps_;
  int64_t num_training_steps_;
};

// The schedule train.lr_scheduler_type names, with its train.lr_scheduler_kwargs.
class LrSchedule {
 public:
  // See make_lr_schedule().
  LrSchedule(const TrainConfig& train, int64_t num_training_steps, int64_t num_warmup_steps);

  // lr of optimizer update `step` (0-based), see the file comment.
  double lr(int64_t step) const;
  // One line for the log, e.g.
  //   "cosine (transformers): warmup 10 steps to 0.0003, then cosine with num_cycles 0.5 to 0 at step 345"
  std::string describe() const;

  LrSchedulerType type() const { return type_; }
  double base_lr() const { return base_lr_; }
  int64_t num_warmup_steps() const { return num_warmup_steps_; }
  int64_t num_training_steps() const { return num_training_steps_; }

 private:
  double transformers_lr(int64_t step) const;
  double deepspeed_lr(int64_t iteration) const;
  double deepspeed_warmup_gamma(int64_t iteration) const;
  double wsd_factor(int64_t step) const;

  LrSchedulerType type_;
  double base_lr_;
  int64_t num_warmup_steps_;
  int64_t num_training_steps_;
  LrSchedulerKwargs kwargs_;
  LinearWarmupDecay linear_;
  double num_cycles_ = 0;              // cosine, cosine_with_restarts (the default filled in)
  int64_t deepspeed_warmup_steps_ = 0;  // max(2, warmup)
  int64_t deepspeed_total_steps_ = 0;   // total_num_steps, or the run's
  double min_lr_rate_ = 0;              // cosine_with_min_lr (min_lr / base, or min_lr_rate)
  int64_t timescale_ = 0;               // inverse_sqrt (the default filled in)
  int64_t stable_steps_ = 0;            // warmup_stable_decay (the default filled in)
};

// Builds the schedule of `train` (train.lr, train.lr_scheduler_type,
// train.lr_scheduler_kwargs) for a run of `num_training_steps` optimizer
// updates with `num_warmup_steps` warmup steps (warmup_steps_for()). Throws
// shardtrain::Error naming the key for values the schedule cannot use.
LrSchedule make_lr_schedule(const TrainConfig& train, int64_t num_training_steps, int64_t num_warmup_steps);

// Checks train.lr_scheduler_type and train.lr_scheduler_kwargs.* without a
// run length: ranges, and that no kwarg is set (in `keys_set`, the keys given
// explicitly) for a type that does not read it. Throws shardtrain::Error.
void validate_lr_schedule_config(const TrainConfig& train, const std::set<std::string>& keys_set);

}  // namespace shardtrain
