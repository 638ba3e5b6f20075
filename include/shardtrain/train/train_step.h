// One optimizer step, the same sequence for the trainer, the tests and the
// benchmarks (docs/DESIGN.md, "One optimizer step"):
//
//   strategy.zero_grad()
//   for each micro-batch m (gradient accumulation):
//     dropout reseeded from (seed, step, m, rank)       when options.dropout_seed is set
//     loss = model.loss(model.forward(batch), labels)
//     strategy.prepare_backward(sync = m is the last)   reduce only on the last (no_sync)
//     (loss x loss_scale / accumulation_steps).backward()  hooks reduce while backward runs
//   strategy.finish_backward()                          gradients are the rank average
//   strategy.step({lr, max_grad_norm, loss_scale})      clip by global norm, AdamW (fp16: unscale, skip on overflow)
//
// Accelerate divides every micro-batch's loss by gradient_accumulation_steps,
// also for a short last group of an epoch; so does train_step().
//
//   StepOptions options; options.lr = schedule.lr(step); options.max_grad_norm = 1.0;
//   StepResult r = train_step(strategy, model, micro_batches, options);
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "shardtrain/data/collator.h"

namespace shardtrain {

class TaskModel;
class Strategy;

// Seed of the default generator (dropout masks) for a micro-step: a
// SplitMix64 hash of (seed, step, micro_step, rank). Reseeding before every
// micro-step makes a resumed run draw the same masks as one never
// interrupted, with no generator state in the checkpoint.
uint64_t train_rng_seed(int64_t seed, int64_t step, int64_t micro_step, int rank);

struct DropoutSeed {
  int64_t seed = 42;
  int64_t step = 0;  // the optimizer step being taken (0-based)
  int rank = 0;
};

// Points of a step a caller may time (benchmarks): after each micro-batch's
// forward + loss, after the last micro-batch's backward, after
// finish_backward(), after step().
enum class StepPoint { kForwardDone, kBackwardDone, kReduced, kStepped };

struct StepOptions {
  double lr = 0;
  double max_grad_norm = 0;               // <= 0: no clipping
  int64_t accumulation_steps = 1;         // the loss divisor (train.gradient_accumulation_steps)
  std::optional<DropoutSeed> dropout_seed;  // unset: the generator is left alone
  std::function<void(StepPoint)> at_point;  // called at each StepPoint when set
  // fp16 loss scaling: backward runs on loss x loss_scale and the strategy
  // divides it out, skipping the update when the gradients are not finite.
  double loss_scale = 1.0;
  // Tests: this rank's loss times infinity before backward (a non-finite
  // gradient on one rank, as an fp16 overflow makes one).
  bool poison_loss = false;
};

struct StepResult {
  double loss = 0;         // this rank's mean loss over its micro-batches
  double grad_norm = 0;    // global norm of the true (unscaled) gradients before clipping
  bool applied = true;     // false: a loss-scaled step with non-finite gradients, skipped on every rank
  int64_t real_tokens = 0; // this rank's non-padding tokens
  int64_t examples = 0;    // this rank's examples
};

// `micro_batches` on the model's device, at least one.
StepResult train_step(Strategy& strategy, TaskModel& model, const std::vector<Batch>& micro_batches,
                      const StepOptions& options);

}  // namespace shardtrain
