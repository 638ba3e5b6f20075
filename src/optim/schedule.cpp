#include "shardtrain/optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "shardtrain/core/check.h"

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
