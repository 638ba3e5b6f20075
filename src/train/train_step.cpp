#include "shardtrain/train/train_step.h"

#include <ATen/ATen.h>

#include <limits>

#include "shardtrain/core/check.h"
#include "shardtrain/data/sampler.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/parallel/strategy.h"

namespace shardtrain {

uint64_t train_rng_seed(int64_t seed, int64_t step, int64_t micro_step, int rank) {
  // Each stage is a bijection of its input (SplitMix64's first output), so two
  // tuples that differ in one field never share a seed.
  uint64_t hash = SplitMix64(static_cast<uint64_t>(seed)).next();
  hash = SplitMix64(hash ^ static_cast<uint64_t>(step)).next();
  hash = SplitMix64(hash ^ static_cast<uint64_t>(micro_step)).next();
  hash = SplitMix64(hash ^ static_cast<uint64_t>(static_cast<int64_t>(rank))).next();
  return hash;
}

StepResult train_step(Strategy& strategy, TaskModel& model, const std::vector<Batch>& micro_batches,
                      const StepOptions& options) {
  ST_ASSERT(!micro_batches.empty(), "train_step: no micro-batch");
  ST_ASSERT(options.accumulation_steps >= 1, "train_step: accumulation_steps must be >= 1");
  StepResult result;
  strategy.zero_grad();
  for (size_t m = 0; m < micro_batches.size(); ++m) {
    const Batch& batch = micro_batches[m];
    if (options.dropout_seed) {
      const DropoutSeed& d = *options.dropout_seed;
      at::manual_seed(train_rng_seed(d.seed, d.step, static_cast<int64_t>(m), d.rank));
    }
    const at::Tensor logits = model.forward_batch(batch);
    at::Tensor loss = model.loss(logits, batch.labels);  // float32
    if (options.at_point) options.at_point(StepPoint::kForwardDone);
    result.loss += loss.item<double>();
    result.real_tokens += batch.num_real_tokens;
    result.examples += batch.size();
    strategy.prepare_backward(/*sync=*/m + 1 == micro_batches.size());
    if (options.poison_loss) loss = loss * std::numeric_limits<double>::infinity();
    if (options.loss_scale != 1.0) loss = loss * options.loss_scale;
    (loss / static_cast<double>(options.accumulation_steps)).backward();
  }
  if (options.at_point) options.at_point(StepPoint::kBackwardDone);
  strategy.finish_backward();
  if (options.at_point) options.at_point(StepPoint::kReduced);
  const StepOutcome outcome = strategy.step({options.lr, options.max_grad_norm, options.loss_scale});
  result.grad_norm = outcome.grad_norm;
  result.applied = outcome.applied;
  if (options.at_point) options.at_point(StepPoint::kStepped);
  result.loss /= static_cast<double>(micro_batches.size());
  return result;
}

}  // namespace shardtrain
