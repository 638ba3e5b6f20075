// Private to src/parallel: the machinery that DataParallel and ZeroStrategy
// share.
//
//   FlatModel        the model's parameters moved into one flat parameter
//                    buffer and one flat gradient buffer (param_layout.h order,
//                    padded to a multiple of the world size); the module's
//                    parameters and their .grad are views into them.
//   GradientBuckets  the gradient buffer cut into buckets at parameter
//                    boundaries (from the end of the layout), a post-hook on
//                    every parameter's gradient accumulator, and the launch of
//                    one collective per complete bucket, strictly in bucket
//                    order, while backward runs (see parallel/ddp.h).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "shardtrain/comm/communicator.h"
#include "shardtrain/optim/param_layout.h"
#include "shardtrain/parallel/strategy.h"

namespace torch {
namespace autograd {
struct Node;
}
}  // namespace torch

namespace shardtrain {

class BertForSequenceClassification;

struct FlatModel {
  std::unique_ptr<ParamLayout> layout;
  int64_t padded_numel = 0;
  at::Tensor params;                   // [padded_numel], the padding zero
  at::Tensor grads;                    // [padded_numel], zeros
  std::vector<at::Tensor> parameters;  // the module's parameters, layout order
};

// Moves the model's parameters (values kept) into new flat buffers padded for
// `world_size` ranks. `who` names the strategy in assertion messages.
FlatModel flatten_model(BertForSequenceClassification& model, int world_size, const std::string& who);

// A post-hook on every parameter's gradient accumulator: ready(i) runs once
// autograd has accumulated parameters[i]'s gradient in a backward pass.
class GradientReadyHooks {
 public:
  GradientReadyHooks(const std::vector<at::Tensor>& parameters, std::function<void(size_t)> ready,
                     const std::string& who);
  ~GradientReadyHooks();  // removes the hooks
  GradientReadyHooks(const GradientReadyHooks&) = delete;
  GradientReadyHooks& operator=(const GradientReadyHooks&) = delete;

 private:
  // The gradient accumulators must stay alive: a leaf holds its accumulator
  // weakly, so a new one (without our hook) would be made for each backward.
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>> hooks_;
};

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

// DDP's buckets: each complete bucket of model.grads all-reduced (average) over
// `comm` while backward runs. `comm`, `model` and `stats` must outlive them.
std::unique_ptr<GradientBuckets> all_reduce_buckets(const FlatModel& model, double bucket_cap_mb, Communicator& comm,
                                                    StrategyStats& stats);

}  // namespace shardtrain
