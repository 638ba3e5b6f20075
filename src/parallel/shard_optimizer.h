// Private to src/parallel: the optimizer over a rank's shard, the same for
// every strategy (DDP's "shard" is the whole buffer), and the rule a step
// follows (docs/DESIGN.md, "Mixed precision").
//
// Where AdamW runs:
//   - on the shard where the shard is (fp32 training: the parameters are the
//     master values);
//   - on an fp32 master copy of the shard when the parameters are 16-bit
//     (mixed precision): the gradients are upcast chunk by chunk, AdamW
//     updates the master, and each chunk's parameters are the master rounded;
//   - on the host (HostOptimizer, offload.h) with optimizer offload on a
//     device that needs it; its host fp32 copy is then the master.
// The choice is made here only.
//
//   ShardOptimizer optimizer(shard_params, adamw_options, offload, /*force=*/false);
//   const StepDecision d = decide_step(global_grad_norm(shard_grads, comm), request);
//   if (d.apply) optimizer.step(shard_params, shard_grads, d.grad_scale, shard_decay, request.lr);
#pragma once
#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "parallel/offload.h"
#include "shardtrain/optim/adamw.h"
#include "shardtrain/parallel/strategy.h"

namespace shardtrain {

// What a step does with the global norm of the gradients as they are (loss
// scaled): the true norm, whether to apply the update (loss scaling and a
// non-finite norm: skip), and the factor the gradients are multiplied by
// before AdamW (clip coefficient / loss scale).
struct StepDecision {
  double grad_norm = 0;
  bool apply = true;
  double grad_scale = 1.0;
};
StepDecision decide_step(double scaled_norm, const StepRequest& request);

class ShardOptimizer {
 public:
  // `shard_params`: the rank's parameter shard (1-D; float32, or 16-bit under
  // mixed precision). `offload`: the config asks for optimizer offload;
  // `force_copies`: tests, see HostOptimizer.
  ShardOptimizer(const at::Tensor& shard_params, const AdamWOptions& options, bool offload, bool force_copies);

  // One step on the shard: gradients multiplied by `grad_scale`, AdamW with
  // `lr`; with offload the gradient spans must have been offloaded
  // (host()->offload_grads / offload_rest) and `shard_grads` is not read.
  void step(at::Tensor shard_params, at::Tensor shard_grads, double grad_scale,
            const std::vector<ElementRange>& decay_ranges, double lr);

  AdamW& adamw() { return host_ ? host_->adamw() : *adamw_; }
  const AdamW& adamw() const { return host_ ? host_->adamw() : *adamw_; }
  HostOptimizer* host() { return host_.get(); }  // null without offload copies
  const HostOptimizer* host() const { return host_.get(); }

  // The fp32 master values when they are not the parameters themselves
  // (16-bit parameters: the master copy, on the host with offload); undefined
  // in fp32 training without offload. Checkpoints read and write these.
  at::Tensor master() const;
  // The parameters changed outside step() (broadcast, a checkpoint read into
  // them): master := parameters.
  void load_master(const at::Tensor& shard_params);
  // A checkpoint was read into master(): parameters := master.
  void store_master(at::Tensor shard_params);
  // Before the device gradient shard is overwritten outside a reduction.
  void synchronize() {
    if (host_) host_->synchronize();
  }
  // A skipped step: forget gradients already sent to the host.
  void discard() {
    if (host_) host_->discard();
  }
  // Adds the optimizer state (AdamW's moments, the master copy, the host
  // copies) to a strategy's accounting.
  void count(StrategyMemory& memory) const;

 private:
  std::unique_ptr<AdamW> adamw_;
  std::unique_ptr<HostOptimizer> host_;
  at::Tensor master_;  // fp32 on the shard's device, for 16-bit parameters without offload
  bool fp32_params_ = true;
};

}  // namespace shardtrain
