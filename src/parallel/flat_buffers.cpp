#include "parallel/flat_buffers.h"

#include <ATen/ATen.h>
#include <mpi.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>

#include "shardtrain/core/check.h"
#include "shardtrain/model/bert.h"

namespace shardtrain {

FlatModel flatten_model(BertForSequenceClassification& model, int world_size, const std::string& who) {
  FlatModel flat;
  auto named = model.state_dict();
  flat.layout = std::make_unique<ParamLayout>(named);
  flat.padded_numel = flat.layout->padded_numel(world_size);
  std::vector<at::Tensor> tensors;
  for (auto& entry : named) {
    ST_ASSERT(entry.second.requires_grad(), who + ": parameter " + entry.first + " does not require grad");
    tensors.push_back(entry.second.detach());
  }
  const at::Device device = tensors.front().device();
  flat.params = flat.layout->flatten(tensors, flat.padded_numel).to(device);
  flat.grads = at::zeros_like(flat.params);
  at::NoGradGuard no_grad;
  const auto& slots = flat.layout->slots();
  for (size_t i = 0; i < slots.size(); ++i) {
    at::Tensor p = named[i].second;
    p.set_data(flat.params.narrow(0, slots[i].offset, slots[i].numel).view(slots[i].shape));
    p.mutable_grad() = flat.grads.narrow(0, slots[i].offset, slots[i].numel).view(slots[i].shape);
    flat.parameters.push_back(p);
  }
  return flat;
}

namespace {

class GradientReadyHook : public torch::autograd::FunctionPostHook {
 public:
  explicit GradientReadyHook(std::function<void()> ready) : ready_(std::move(ready)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    ready_();
    return outputs;
  }

 private:
  std::function<void()> ready_;
};

}  // namespace

GradientReadyHooks::GradientReadyHooks(const std::vector<at::Tensor>& parameters, std::function<void(size_t)> ready,
                                       const std::string& who) {
  auto shared_ready = std::make_shared<std::function<void(size_t)>>(std::move(ready));
  for (size_t i = 0; i < parameters.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(parameters[i]);
    ST_ASSERT(accumulator != nullptr, who + ": parameter " + std::to_string(i) + " has no gradient accumulator");
    const uintptr_t key =
        accumulator->add_post_hook(std::make_unique<GradientReadyHook>([shared_ready, i] { (*shared_ready)(i); }));
    hooks_.emplace_back(std::move(accumulator), key);
  }
}

GradientReadyHooks::~GradientReadyHooks() {
  for (auto& hook : hooks_) hook.first->del_post_hook(hook.second);
}

GradientBuckets::GradientBuckets(const FlatModel& model, double bucket_cap_mb, LaunchFn launch, StrategyStats& stats)
    : launch_(std::move(launch)), stats_(stats) {
  ST_ASSERT(bucket_cap_mb > 0, "GradientBuckets: bucket_cap_mb must be > 0");
  // Buckets from the end of the layout backwards, cut at parameter boundaries.
  const auto& slots = model.layout->slots();
  const int64_t cap_elements = std::max<int64_t>(1, static_cast<int64_t>(bucket_cap_mb * 1024 * 1024) / 4);
  bucket_of_slot_.assign(slots.size(), 0);
  int64_t end = model.layout->numel();
  size_t k = slots.size();
  while (k > 0) {
    int count = 0;
    do {
      --k;
      bucket_of_slot_[k] = static_cast<int>(buckets_.size());
      ++count;
    } while (k > 0 && end - slots[k - 1].offset <= cap_elements);
    buckets_.push_back({slots[k].offset, end});
    slots_in_bucket_.push_back(count);
    end = slots[k].offset;
  }
  slot_done_.assign(slots.size(), 0);
  reset_round();

  hooks_ = std::make_unique<GradientReadyHooks>(model.parameters, [this](size_t i) { on_gradient(i); },
                                                "GradientBuckets");
}

std::unique_ptr<GradientBuckets> all_reduce_buckets(const FlatModel& model, double bucket_cap_mb, Communicator& comm,
                                                    StrategyStats& stats) {
  at::Tensor grads = model.grads;
  return std::make_unique<GradientBuckets>(
      model, bucket_cap_mb,
      [&comm, grads](ElementRange r) {
        return comm.all_reduce_async(grads.narrow(0, r.begin, r.size()), ReduceOp::kAvg);
      },
      stats);
}

void GradientBuckets::reset_round() {
  pending_ = slots_in_bucket_;
  std::fill(slot_done_.begin(), slot_done_.end(), 0);
  works_.clear();
  works_.resize(buckets_.size());
  next_launch_ = 0;
}

void GradientBuckets::launch(size_t bucket, bool from_hook) {
  works_[bucket] = launch_(buckets_[bucket]);
  ++stats_.buckets_total;
  if (from_hook) ++stats_.buckets_during_backward;
}

void GradientBuckets::on_gradient(size_t slot) {
  if (!sync_ || slot_done_[slot]) return;
  slot_done_[slot] = 1;
  --pending_[bucket_of_slot_[slot]];
  while (next_launch_ < buckets_.size() && pending_[next_launch_] == 0) launch(next_launch_++, true);
  // MPI moves non-blocking collectives forward only inside MPI calls.
  for (size_t b = 0; b < next_launch_; ++b)
    if (works_[b]) works_[b]->test();
}

void GradientBuckets::prepare(bool sync) {
  ST_ASSERT(next_launch_ == 0, "prepare_backward() while gradient reductions are pending");
  sync_ = sync;
  if (sync) reset_round();
}

void GradientBuckets::finish() {
  while (next_launch_ < buckets_.size()) launch(next_launch_++, false);
  const double start = MPI_Wtime();
  for (auto& work : works_) work->wait();
  stats_.seconds_waiting += MPI_Wtime() - start;
  sync_ = false;
  reset_round();
}

}  // namespace shardtrain
