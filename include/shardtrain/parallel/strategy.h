// Strategy: how parameters, gradients and optimizer state are spread over the
// ranks, and how gradients are combined. The model knows nothing about ranks
// (docs/DESIGN.md, "Strategies wrap the model"): a strategy wraps a UnitModel
// (model/unit_model.h) from outside, after the model is built and before
// training starts.
//
// One training step with any strategy (train/train_step.h does exactly this;
// docs/DESIGN.md, "One optimizer step"):
//
//   strategy->zero_grad();
//   for (int m = 0; m < accumulation_steps; ++m) {
//     strategy->prepare_backward(/*sync=*/m + 1 == accumulation_steps);
//     at::Tensor loss = model->loss(model->forward(...), labels) / accumulation_steps;
//     loss.backward();            // hooks reduce gradient buckets while backward runs
//   }
//   strategy->finish_backward();  // remaining buckets, wait: gradients are the rank average
//   StepOutcome out = strategy->step({lr, max_grad_norm});  // clip by global norm + AdamW
//
// DDP (parallel/ddp.h) is the reference every other strategy is tested against
// (docs/DESIGN.md, "DDP is the reference"). ZeRO stage 1 is parallel/zero1.h;
// stage 2 and 3, FSDP and hybrid sharding are parallel/sharded.h;
// make_strategy() (parallel/make_strategy.h) builds one from the [parallel]
// config.
#pragma once
#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "shardtrain/checkpoint/flat_state.h"
#include "shardtrain/optim/adamw.h"
#include "shardtrain/optim/param_layout.h"

namespace shardtrain {

class Communicator;
class UnitModel;

// Mixed precision (docs/DESIGN.md, "Mixed precision"): the dtype of the
// model's parameters and gradients (what forward and backward compute in,
// what all-gathers move) and of gradient reductions (what reduce-scatters and
// all-reduces move). float32 for both is fp32 training. With 16-bit
// parameters every strategy keeps an fp32 master copy of its shard next to
// AdamW's fp32 state, steps the master, and writes the master to checkpoints;
// the 16-bit parameters are its rounded copy.
struct MixedPrecision {
  at::ScalarType param_dtype = at::kFloat;   // float32, bfloat16 or float16
  at::ScalarType reduce_dtype = at::kFloat;  // float32 or param_dtype
  bool enabled() const { return param_dtype != at::kFloat; }
};

// What one step() does.
struct StepRequest {
  double lr = 0;
  double max_grad_norm = 0;  // clip to this global norm; <= 0: no clipping
  // The gradients are loss_scale times the true ones (fp16 loss scaling):
  // step() divides it out, and when the gradient norm is not finite it skips
  // the update instead (no parameter or AdamW change, the step count stays).
  // 1 = no loss scaling (a non-finite norm is applied as torch would).
  double loss_scale = 1.0;
};

struct StepOutcome {
  double grad_norm = 0;  // global norm of the true (unscaled) gradients before clipping
  bool applied = true;   // false: skipped (loss scaling and a non-finite norm)
};

// Counters for logs and benchmarks.
struct StrategyStats {
  int64_t buckets_total = 0;             // gradient reductions launched (all steps)
  int64_t buckets_during_backward = 0;   // of those, launched from a hook while backward ran
  double seconds_waiting = 0;            // blocked waiting for collectives (exposed communication)
  int64_t gathers_total = 0;             // parameter all-gathers of sharded units (zero3 / fsdp)
  int64_t gathers_prefetched = 0;        // of those, launched ahead of the unit that needed them
  int64_t bytes_sent = 0;                // bytes this rank sent in the strategy's collectives (ring accounting)
};

// Bytes one rank holds for training state, as the ZeRO paper counts them
// (padding included): parameters and gradients in their dtype (fp32: 4 + 4
// bytes per element; mixed precision: 2 + 2), the optimizer state 8 bytes per
// element for AdamW's moments plus 4 for the fp32 master copy under mixed
// precision (the paper's K = 12).
struct StrategyMemory {
  int64_t param_bytes = 0;          // parameters held between steps (full copies and shards)
  int64_t grad_bytes = 0;           // gradients held between steps
  int64_t optimizer_bytes = 0;      // AdamW state (and the fp32 master shard when offloaded)
  int64_t peak_transient_bytes = 0; // the most gathered parameters + unsharded gradients alive at once
  // Of the three above, the bytes in host memory because of optimizer offload
  // (master copy, gradient copy and AdamW state of the shard); 0 without offload.
  int64_t host_bytes = 0;
  int64_t total() const { return param_bytes + grad_bytes + optimizer_bytes; }
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;

  // Makes every rank's parameters equal to `root`'s (initial weights).
  virtual void broadcast_parameters(int root) = 0;
  // Sets all gradients to zero.
  virtual void zero_grad() = 0;
  // Before each micro-step's backward: sync = true on the last micro-step of
  // an optimizer step (its gradients are reduced), false on the others
  // (gradients only accumulate locally, like DDP's no_sync()).
  virtual void prepare_backward(bool sync) = 0;
  // After the last micro-step's backward: every gradient reduction launched
  // and complete; the gradients are the average over ranks.
  virtual void finish_backward() = 0;
  // Clips gradients to request.max_grad_norm by global L2 norm, then one AdamW
  // step with learning rate request.lr (see StepRequest for loss scaling).
  virtual StepOutcome step(const StepRequest& request) = 0;

  virtual const ParamLayout& layout() const = 0;
  // The full flat parameter buffer (layout order, padded_numel(world size)
  // elements; the module's parameters are views into it). Identical on every
  // rank after broadcast_parameters(), step() and finish_load().
  virtual at::Tensor flat_params() const = 0;
  // The parts of the flat parameter / optimizer buffers this rank writes to a
  // checkpoint (the parts of all ranks tile the layout) and fills on resume:
  // at least one (possibly empty) part per rank.
  virtual std::vector<FlatPart> checkpoint_parts() = 0;
  // AdamW step count (checkpointed, restored with load_optimizer_step()).
  virtual int64_t optimizer_step() const = 0;
  // After the checkpoint_parts() buffers were filled from a checkpoint: make
  // every rank's full state consistent again (DDP: all-gather the parts) and
  // set the AdamW step count.
  virtual void finish_load(int64_t optimizer_step) = 0;

  // The strategy's counters, bytes_sent over every communicator it uses
  // since it was built.
  const StrategyStats& stats() const;
  virtual StrategyMemory memory() const = 0;

 protected:
  // The counters a strategy updates (its Impl keeps a reference).
  StrategyStats& counters() { return stats_; }
  // Counts the bytes `comm` sends from now on in stats().bytes_sent.
  void count_bytes_of(const Communicator& comm);

 private:
  mutable StrategyStats stats_;
  std::vector<std::pair<const Communicator*, int64_t>> byte_counters_;  // communicator, bytes at count_bytes_of()
};

}  // namespace shardtrain
