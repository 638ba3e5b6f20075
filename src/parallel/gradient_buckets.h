// Private to src/parallel: DDP's gradient buckets, shared by DataParallel and
// ZeroStrategy (docs/DESIGN.md, "Gradient buckets").
//
// The flat gradient buffer is cut at parameter boundaries into contiguous
// ranges of about bucket_cap_mb, from the end of the layout (backward produces
// the last layers' gradients first). A hook on every parameter's gradient
// accumulator counts the parameters of its bucket; a complete bucket's
// collective is launched at once, non-blocking, strictly in bucket order on
// every rank (a bucket that completes early waits for the ones before it), so
// the ranks' collectives always match. Hooks also test the collectives in
// flight, which is what moves MPI forward.
//
//   DDP:    each bucket all-reduced (average) in place   all_reduce_buckets()
//   ZeRO-1: each bucket reduce-scattered (average) into  reduce_scatter_buckets()
//           the ranks' shards of the flat buffer: rank r
//           receives the bucket's elements inside its
//           shard, in place in the gradient buffer
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "parallel/flat_model.h"
#include "shardtrain/comm/communicator.h"
#include "shardtrain/parallel/strategy.h"

namespace shardtrain {

class GradientBuckets {
 public:
  // Starts the reduction of grads elements `range`; returns its handle.
  using LaunchFn = std::function<std::unique_ptr<Work>(ElementRange range)>;

  // Hooks every parameter of `model` (its gradient accumulator); `model` and
  // `stats` must outlive this object. bucket_cap_mb > 0 (checked by the caller,
  // which owns the config error).
  GradientBuckets(const FlatModel& model, double bucket_cap_mb, LaunchFn launch, StrategyStats& stats);
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;

  // Before each backward: sync = true launches reductions from the hooks.
  void prepare(bool sync);
  // Launches the buckets not launched yet, waits for all of them, and turns
  // the hooks off until the next prepare(true).
  void finish();
  // Bucket b covers grads elements [begin, end); bucket 0 is launched first.
  const std::vector<ElementRange>& buckets() const { return buckets_; }

 private:
  void reset_round();
  void launch(size_t bucket, bool from_hook);
  void on_gradient(size_t slot);  // called by autograd once slot's gradient is accumulated

  LaunchFn launch_;
  StrategyStats& stats_;
  std::vector<ElementRange> buckets_;
  std::vector<int> bucket_of_slot_;
  std::vector<int> slots_in_bucket_;
  // Per backward with sync on:
  std::vector<int> pending_;  // by bucket: slots whose gradient is not final yet
  std::vector<char> slot_done_;
  std::vector<std::unique_ptr<Work>> works_;  // by bucket; null = not launched
  size_t next_launch_ = 0;
  bool sync_ = false;
  std::unique_ptr<GradientReadyHooks> hooks_;
};

// DDP: each complete bucket of model.grads all-reduced (average) over `comm`
// while backward runs. `comm`, `model` and `stats` must outlive them.
std::unique_ptr<GradientBuckets> all_reduce_buckets(const FlatModel& model, double bucket_cap_mb, Communicator& comm,
                                                    StrategyStats& stats);

// ZeRO-1: each complete bucket reduce-scattered (average) over `comm`: the
// bucket's elements inside rank r's shard (ParamLayout::shard_range(r,
// comm.size()) of the padded buffer) are averaged onto rank r, in place in
// model.grads. Elements outside this rank's shard keep its local gradients.
std::unique_ptr<GradientBuckets> reduce_scatter_buckets(const FlatModel& model, double bucket_cap_mb,
                                                        Communicator& comm, StrategyStats& stats);

}  // namespace shardtrain
