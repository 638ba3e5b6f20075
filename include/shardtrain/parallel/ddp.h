// DDP: data parallelism with overlapped, bucketed gradient all-reduce over
// flat buffers — the reference strategy (docs/DESIGN.md, "DDP is the reference").
//
// Buffers (param_layout.h order, padded to a multiple of the world size):
//   params  [P]   every parameter of the model; the module's parameters are
//                 views into it (set_data), so forward/backward use it directly
//   grads   [P]   every parameter's .grad is a view into it; autograd
//                 accumulates into those views in place
//   AdamW   [P]   exp_avg, exp_avg_sq: one full copy per rank, stepped by every
//                 rank alike (so parameters stay identical without a broadcast);
//                 with 16-bit params and grads (mixed precision) also an fp32
//                 master copy [P], which checkpoints hold
//
// Buckets: the gradient buffer is cut at parameter boundaries into contiguous
// ranges of about bucket_cap_mb, starting from the end of the layout (the
// classifier and the last encoder layer), because backward produces the last
// layers' gradients first. A post-hook on every parameter's gradient
// accumulator counts the parameters of its bucket; when a bucket is complete
// its all-reduce (average) is launched non-blocking while backward continues.
// Buckets are launched strictly in bucket order on every rank (a bucket that
// completes early waits for the ones before it), so the ranks' collectives
// always match. Hooks also poll the reductions in flight to drive MPI
// progress. finish_backward() launches whatever is left (e.g. parameters that
// got no gradient) and waits.
//
// Gradient accumulation: prepare_backward(false) turns the hooks off for that
// backward (no_sync), so micro-steps only accumulate locally.
//
//   DdpOptions options; options.bucket_cap_mb = 25;
//   DataParallel ddp(*model, comm, adamw_options, options);
//   ddp.broadcast_parameters(0);
#pragma once
#include <memory>
#include <vector>

#include "shardtrain/parallel/strategy.h"

namespace shardtrain {

struct DdpOptions {
  double bucket_cap_mb = 25.0;  // > 0; gradient bytes per bucket (a single larger parameter is its own bucket)
  MixedPrecision precision;     // reduce_dtype must equal param_dtype (the buckets are the gradients)
};

class DataParallel : public Strategy {
 public:
  // The model's parameters move into the flat buffers (their values are kept).
  // `comm` must outlive this object. Throws Error for bucket_cap_mb <= 0.
  DataParallel(UnitModel& model, Communicator& comm, const AdamWOptions& adamw,
               const DdpOptions& options = {});
  ~DataParallel() override;  // removes the hooks (the model may live on)

  std::string name() const override { return "ddp"; }
  void broadcast_parameters(int root) override;
  void zero_grad() override;
  void prepare_backward(bool sync) override;
  void finish_backward() override;
  StepOutcome step(const StepRequest& request) override;
  const ParamLayout& layout() const override;
  // One contiguous part: shard_range(rank, world size) of the layout.
  std::vector<FlatPart> checkpoint_parts() override;
  int64_t optimizer_step() const override;
  void finish_load(int64_t optimizer_step) override;
  StrategyMemory memory() const override;

  at::Tensor flat_params() const override;
  // The flat gradient buffer (numel padded_numel(world size)); for tests and benchmarks.
  at::Tensor flat_grads() const;
  // The AdamW state over the whole padded buffer; for tests.
  const AdamW& optimizer() const;
  // Bucket b covers grads elements [begin, end); bucket 0 is launched first.
  std::vector<ElementRange> buckets() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardtrain
