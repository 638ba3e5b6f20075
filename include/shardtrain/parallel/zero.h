// ZeRO stage 1 and 2 (DeepSpeed semantics): the optimizer state, and with
// stage 2 the reduced gradients, are sharded over the ranks; the parameters
// stay replicated.
//
// Buffers (param_layout.h order, padded to a multiple of the world size W;
// rank r owns shard S_r = layout().shard_range(r, W), |S_r| = padded / W):
//   params      [padded]  full copy on every rank; the module's parameters
//                         are views into it (as with DDP)
//   grads       [padded]  every parameter's .grad is a view into it; autograd
//                         accumulates the local (unreduced) gradients here
//   grad shard  [|S_r|]   stage 2: this rank's part of the rank-averaged gradient
//   AdamW       [|S_r|]   exp_avg, exp_avg_sq for S_r only — the 1/W memory saving
//
// Gradient reduction:
//   stage 1  the buckets of DDP (same cut, same hooks, same all-reduce while
//            backward runs); each rank then reads its S_r slice of the result
//   stage 2  finish_backward() reduce-scatters (average) the whole gradient
//            buffer: rank r receives only S_r (one collective per step, after
//            backward; bucketed reduce-scatter during backward is not done yet)
//
// Bytes on the wire per step (S = padded buffer bytes, ring accounting):
// DDP 2 S (n-1)/n; stage 1 3 S (n-1)/n (all-reduce + parameter all-gather);
// stage 2 2 S (n-1)/n (reduce-scatter + all-gather). Memory: both stages keep
// AdamW state for S_r only (8 bytes per parameter become 8/W). Stage 2 does
// not free the full gradient buffer yet (autograd accumulates into it), so
// its gradient memory is that of stage 1 plus the S_r shard buffer.
//
// step(lr, max_grad_norm): global gradient norm over the shards
// (clip_grad_norm with the communicator), AdamW on params[S_r] with the S_r
// gradient, then an all-gather of the parameter shards so every rank holds the
// new full parameters.
//
// Checkpoints: checkpoint_part() is S_r clipped to the layout (params, and this
// rank's AdamW state), the same file format as every strategy writes, so a
// checkpoint moves between ddp / zero1 / zero2 and world sizes.
//
// Compared with DDP on the same batches: stage 1 reduces the same buckets with
// the same all-reduce, and AdamW is elementwise (adamw.h), so the parameters
// match DDP's up to the float64 rounding of the sharded norm; stage 2 sums
// the gradients with reduce-scatter instead of all-reduce (another summation
// order for W > 2, ~1 ulp). tests/test_zero_mpi.cpp checks both.
//
//   ZeroOptions options; options.stage = 2;
//   ZeroStrategy zero(*model, comm, adamw_options, options);
//   zero.broadcast_parameters(0);
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "shardtrain/parallel/strategy.h"

namespace shardtrain {

struct ZeroOptions {
  int stage = 1;                // 1 or 2
  double bucket_cap_mb = 25.0;  // > 0; stage 1's all-reduce buckets, as DdpOptions::bucket_cap_mb
};

class ZeroStrategy : public Strategy {
 public:
  // The model's parameters move into the flat buffers (their values are kept).
  // `comm` must outlive this object. Throws Error for a stage other than 1 or 2
  // and for bucket_cap_mb <= 0.
  ZeroStrategy(BertForSequenceClassification& model, Communicator& comm, const AdamWOptions& adamw,
               const ZeroOptions& options = {});
  ~ZeroStrategy() override;  // removes the hooks (the model may live on)

  std::string name() const override;  // "zero1" or "zero2"
  int stage() const;
  void broadcast_parameters(int root) override;
  void zero_grad() override;
  void prepare_backward(bool sync) override;
  void finish_backward() override;
  double step(double lr, double max_grad_norm) override;
  const ParamLayout& layout() const override;
  at::Tensor flat_params() const override;
  FlatPart checkpoint_part() override;
  int64_t optimizer_step() const override;
  void finish_load(int64_t optimizer_step) override;
  const StrategyStats& stats() const override;

  // This rank's shard S_r of the padded buffers.
  ElementRange shard() const;
  // The rank-averaged gradient of S_r (|S_r| elements) after finish_backward()
  // (clipped in place by step()). Stage 1: a view into the full gradient buffer.
  at::Tensor shard_grads() const;
  // The AdamW state of S_r (|S_r| elements each); for tests and benchmarks.
  const AdamW& optimizer() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardtrain
