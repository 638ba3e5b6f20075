// Private to src/parallel: optimizer offload (DeepSpeed
// `offload_optimizer.device = "cpu"`, ZeRO-Offload), shared by ZeroStrategy
// and ShardedStrategy through ShardOptimizer (shard_optimizer.h).
//
// A rank's shard of the fp32 master parameters, of the reduced gradients and
// of the AdamW state lives in host memory and AdamW runs on the CPU. The
// device keeps its shard of the parameters (what the all-gathers read) and of
// the gradients (what the reduce-scatters accumulate into).
//
// The copies overlap (on a CUDA device; every host buffer is pinned):
//   - offload_grads(span) queues the device->host copy of one span of the
//     gradient shard on a side copy stream, behind the work already queued
//     on the compute stream (the reduce-scatter that produced it), and
//     returns at once. ShardedStrategy calls it for each unit as soon as the
//     unit's reduce-scatter completes, so the copies run while earlier units
//     still compute their backward; ZeroStrategy after backward, in pieces.
//   - step() walks the spans in the order they were offloaded: it waits for
//     a span's copy (usually long done), runs AdamW on that span on the CPU,
//     and queues the span's updated parameters host->device on the copy
//     stream, so the uploads overlap the CPU's work on the next spans. At the
//     end the compute stream waits for the copy stream (the host does not).
// On a CPU device there is nothing to copy: strategies use no HostOptimizer
// there, unless a test forces the copies (`force`), which then run
// synchronously through the same bookkeeping.
//
//   HostOptimizer host(shard_params, adamw_options, /*force=*/false);
//   ... each span of the gradient shard when it is final: host.offload_grads(shard_grads, begin, count);
//   host.step(shard_params, clip_coefficient, shard_decay, lr);
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "shardtrain/optim/adamw.h"
#include "shardtrain/parallel/strategy.h"

namespace shardtrain {

class HostOptimizer {
 public:
  // `device_params`: the rank's parameter shard (1-D, on the device; float32,
  // or 16-bit under mixed precision: the copies convert); the fp32 master
  // copy starts as its values.
  HostOptimizer(const at::Tensor& device_params, const AdamWOptions& options, bool force);
  ~HostOptimizer();
  HostOptimizer(const HostOptimizer&) = delete;
  HostOptimizer& operator=(const HostOptimizer&) = delete;

  // Whether a device shard needs offload copies: not on a CPU device unless forced.
  static bool needed(const at::Tensor& device_params, bool force);

  // Queues the copy of device_grads[begin, begin + count) into the host
  // gradient shard. The spans offloaded since the last step() must not
  // overlap; step() needs them to cover the shard.
  void offload_grads(const at::Tensor& device_grads, int64_t begin, int64_t count);
  // Queues the spans not offloaded since the last step() (in `pieces` equal
  // parts), e.g. after a backward that offloaded nothing itself.
  // A step that is skipped (loss scaling) drops what was offloaded with discard().
  void offload_rest(const at::Tensor& device_grads, int pieces = 1);
  bool offloaded(int64_t begin) const;  // a span starting at `begin` is queued

  // One AdamW step on the host, span by span, with the gradients multiplied
  // by `grad_scale` first (the clipping coefficient; 1 = none), each span's
  // new parameters copied back into `device_params` as it is done.
  // decay_ranges: relative to the shard. Every element must have been offloaded.
  void step(const at::Tensor& device_params, double grad_scale, const std::vector<ElementRange>& decay_ranges,
            double lr);

  // Blocks until every queued copy is done (before the device gradient shard
  // is overwritten by something other than a reduction, e.g. zero_grad()).
  void synchronize();
  // Forgets the gradient spans offloaded since the last step (a skipped step).
  void discard();
  // master := device_params (after a broadcast), and the other way round
  // (after a checkpoint was read into the master).
  void load_master(const at::Tensor& device_params);
  void store_master(const at::Tensor& device_params);

  AdamW& adamw();
  const AdamW& adamw() const;
  at::Tensor& master();              // host fp32, the shard's size
  const at::Tensor& master() const;
  int64_t host_bytes() const;        // master + gradients + AdamW state in host memory
  // Adds the host copies (master, gradients) to a strategy's accounting, which
  // already counts the AdamW state, and sets host_bytes.
  void count(StrategyMemory& memory) const;
  bool asynchronous() const;         // copies on a side stream (CUDA), not synchronous

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardtrain
