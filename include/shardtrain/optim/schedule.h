// Learning-rate schedule: linear warmup then linear decay to zero, equal to
// transformers' get_linear_schedule_with_warmup (the reference workflow's).
//
//   lr(s) = base * s / max(1, warmup)                             s <  warmup
//   lr(s) = base * max(0, (total - s) / max(1, total - warmup))   s >= warmup
//
// computed in float64 in exactly that order, so the value is the double HF's
// LambdaLR puts in param_groups[i]["lr"].
//
// Which s for which optimizer step: HF/Accelerate call scheduler.step() after
// optimizer.step(), so optimizer step k (0-based: the first update is k = 0)
// runs with lr(k). In particular the first update runs with lr(0) = 0 when
// warmup > 0 (it still advances Adam's moments and step count). Pass the
// number of optimizer updates done so far (not micro-batches: with gradient
// accumulation one update covers several).
//
// Warmup from a ratio: transformers' TrainingArguments.get_warmup_steps uses
//   warmup_steps > 0 ? warmup_steps : ceil(total * warmup_ratio)
// and so does warmup_steps_for().
#pragma once

#include <cstdint>

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

}  // namespace shardtrain
