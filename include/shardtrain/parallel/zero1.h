// ZeRO stage 1 (DeepSpeed semantics): the AdamW state is sharded over the
// ranks; parameters and gradients stay replicated. (Stage 2 and 3 are
// ShardedStrategy, parallel/sharded.h.)
//
// Buffers (param_layout.h order, padded to a multiple of the world size W;
// rank r owns shard S_r = layout().shard_range(r, W), |S_r| = padded / W):
//   params      [padded]  full copy on every rank; the module's parameters
//                         are views into it (as with DDP)
//   grads       [padded]  every parameter's .grad is a view into it
//   AdamW       [|S_r|]   exp_avg, exp_avg_sq for S_r only — the 1/W memory saving;
//                         with 16-bit params and grads (mixed precision) also
//                         an fp32 master copy of S_r (P_os: 4 Psi + 12 Psi / W)
//
// Gradients: DDP's buckets and hooks (parallel/gradient_buckets.h), but each
// complete bucket is reduce-scattered instead of all-reduced: the bucket's
// elements inside S_r are averaged onto rank r while backward runs (the
// paper's P_os: reduce-scatter the gradients into the shards, then all-gather
// the parameters).
//
// step(lr, max_grad_norm): global gradient norm over the shards
// (clip_grad_norm with the communicator), AdamW on params[S_r] with the S_r
// gradient, then an all-gather of the parameter shards (in pieces of
// allgather_bucket_size elements per rank when set) so every rank holds the
// new full parameters. offload_optimizer (parallel/offload.h): the AdamW
// state, an fp32 master copy of S_r and a copy of its gradients live in
// pinned host memory and the step runs on the CPU; the gradient slice goes
// to the host in pieces on a side stream, so each piece's AdamW overlaps the
// copies of the next pieces down and of the finished pieces back up (on a
// CPU run everything is in host memory already and nothing is copied).
//
// Bytes on the wire per step (S = padded buffer bytes, ring accounting):
// 2 S (W-1)/W (reduce-scatter + parameter all-gather), as DDP's all-reduce.
// Memory: params and grads 4 bytes per element each, AdamW 8/W.
//
// Checkpoints: S_r clipped to the layout (params, and this rank's AdamW state),
// the same file format as every strategy writes.
//
// Compared with DDP on the same batches: the same buckets, the average summed
// over the same ranks (in the MPI library's reduction order), and AdamW is
// elementwise (adamw.h), so the parameters match DDP's up to the float32
// rounding of that order and the float64 rounding of the sharded norm
// (tests/test_zero_mpi.cpp).
//
//   ZeroStrategy zero(*model, comm, adamw_options, ZeroOptions{});
//   zero.broadcast_parameters(0);
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "shardtrain/parallel/strategy.h"

namespace shardtrain {

struct ZeroOptions {
  double bucket_cap_mb = 25.0;        // > 0; the reduce-scatter buckets, as DdpOptions::bucket_cap_mb
  int64_t allgather_bucket_size = 0;  // parameter elements per rank per all-gather after the step; 0 = one
  bool offload_optimizer = false;     // AdamW state and master shard in host memory
  // Tests: with offload_optimizer, keep the host copies and run the offload
  // pipeline even when the shard is in host memory already (a CPU run).
  bool force_offload_copies = false;
  MixedPrecision precision;  // reduce_dtype must equal param_dtype (DeepSpeed's 16-bit reduction)
};

class ZeroStrategy : public Strategy {
 public:
  // The model's parameters move into the flat buffers (their values are kept).
  // `comm` must outlive this object. Throws Error for bucket_cap_mb <= 0.
  ZeroStrategy(UnitModel& model, Communicator& comm, const AdamWOptions& adamw, const ZeroOptions& options = {});
  ~ZeroStrategy() override;  // removes the hooks (the model may live on)

  std::string name() const override;  // "zero1"
  void broadcast_parameters(int root) override;
  void zero_grad() override;
  void prepare_backward(bool sync) override;
  void finish_backward() override;
  StepOutcome step(const StepRequest& request) override;
  const ParamLayout& layout() const override;
  at::Tensor flat_params() const override;
  // One contiguous part: S_r clipped to the layout.
  std::vector<FlatPart> checkpoint_parts() override;
  int64_t optimizer_step() const override;
  void finish_load(int64_t optimizer_step) override;
  StrategyMemory memory() const override;

  // This rank's shard S_r of the padded buffers.
  ElementRange shard() const;
  // The rank-averaged gradient of S_r (|S_r| elements) after finish_backward()
  // (clipped in place by step()): a view into the full gradient buffer.
  at::Tensor shard_grads() const;
  // The AdamW state of S_r (|S_r| elements each); for tests and benchmarks.
  const AdamW& optimizer() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardtrain
