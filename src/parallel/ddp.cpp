#include "shardtrain/parallel/ddp.h"

#include <ATen/ATen.h>
#include <mpi.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "shardtrain/comm/communicator.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/model/bert.h"
#include "shardtrain/optim/clip.h"
#include "shardtrain/train/train_checkpoint.h"

namespace shardtrain {

struct DataParallel::Impl {
  Communicator& comm;
  std::unique_ptr<ParamLayout> layout;
  int64_t padded_numel = 0;
  at::Tensor params;
  at::Tensor grads;
  std::unique_ptr<AdamW> adamw;

  std::vector<ElementRange> buckets;    // launch order: bucket 0 holds the end of the layout
  std::vector<int> bucket_of_slot;
  std::vector<int> slots_in_bucket;
  // Per backward with sync on:
  std::vector<int> pending;             // slots of the bucket whose gradient is not final yet
  std::vector<char> slot_done;
  std::vector<std::unique_ptr<Work>> works;  // by bucket; null = not launched
  size_t next_launch = 0;
  bool sync = false;

  // The gradient accumulators must stay alive: a leaf holds its accumulator
  // weakly, so a new one (without our hook) would be made for each backward.
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>> hooks;
  StrategyStats stats;

  explicit Impl(Communicator& c) : comm(c) {}

  void reset_round() {
    pending = slots_in_bucket;
    std::fill(slot_done.begin(), slot_done.end(), 0);
    works.clear();
    works.resize(buckets.size());
    next_launch = 0;
  }

  void launch(size_t b, bool from_hook) {
    const ElementRange r = buckets[b];
    works[b] = comm.all_reduce_async(grads.narrow(0, r.begin, r.size()), ReduceOp::kAvg);
    ++stats.buckets_total;
    if (from_hook) ++stats.buckets_during_backward;
  }

  // Called by autograd right after slot's gradient was accumulated.
  void on_gradient(size_t slot) {
    if (!sync || slot_done[slot]) return;
    slot_done[slot] = 1;
    --pending[bucket_of_slot[slot]];
    while (next_launch < buckets.size() && pending[next_launch] == 0) launch(next_launch++, true);
    // MPI moves non-blocking collectives forward only inside MPI calls.
    for (size_t b = 0; b < next_launch; ++b)
      if (works[b]) works[b]->test();
  }
};

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

DataParallel::DataParallel(BertForSequenceClassification& model, Communicator& comm, const AdamWOptions& adamw,
                           const DdpOptions& options)
    : impl_(std::make_unique<Impl>(comm)) {
  if (!(options.bucket_cap_mb > 0))
    throw Error(str_format("parallel.bucket_cap_mb must be > 0, got %g", options.bucket_cap_mb));
  Impl& s = *impl_;
  auto named = model.state_dict();
  s.layout = std::make_unique<ParamLayout>(named);
  s.padded_numel = s.layout->padded_numel(comm.size());
  std::vector<at::Tensor> tensors;
  for (auto& entry : named) {
    ST_ASSERT(entry.second.requires_grad(), "DataParallel: parameter " + entry.first + " does not require grad");
    tensors.push_back(entry.second.detach());
  }
  const at::Device device = tensors.front().device();
  s.params = s.layout->flatten(tensors, s.padded_numel).to(device);
  s.grads = at::zeros_like(s.params);
  {
    at::NoGradGuard no_grad;
    const auto& slots = s.layout->slots();
    for (size_t i = 0; i < slots.size(); ++i) {
      at::Tensor p = named[i].second;
      p.set_data(s.params.narrow(0, slots[i].offset, slots[i].numel).view(slots[i].shape));
      p.mutable_grad() = s.grads.narrow(0, slots[i].offset, slots[i].numel).view(slots[i].shape);
    }
  }
  s.adamw = std::make_unique<AdamW>(s.padded_numel, adamw, s.params.options());

  // Buckets from the end of the layout backwards, cut at parameter boundaries.
  const auto& slots = s.layout->slots();
  const int64_t cap_elements =
      std::max<int64_t>(1, static_cast<int64_t>(options.bucket_cap_mb * 1024 * 1024) / 4);
  s.bucket_of_slot.assign(slots.size(), 0);
  int64_t end = s.layout->numel();
  size_t k = slots.size();
  while (k > 0) {
    int count = 0;
    do {
      --k;
      s.bucket_of_slot[k] = static_cast<int>(s.buckets.size());
      ++count;
    } while (k > 0 && end - slots[k - 1].offset <= cap_elements);
    s.buckets.push_back({slots[k].offset, end});
    s.slots_in_bucket.push_back(count);
    end = slots[k].offset;
  }
  s.slot_done.assign(slots.size(), 0);
  s.reset_round();

  for (size_t i = 0; i < slots.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(named[i].second);
    ST_ASSERT(accumulator != nullptr, "DataParallel: no gradient accumulator for " + slots[i].name);
    const uintptr_t key = accumulator->add_post_hook(std::make_unique<GradientReadyHook>([impl = impl_.get(), i] { impl->on_gradient(i); }));
    s.hooks.emplace_back(std::move(accumulator), key);
  }
}

DataParallel::~DataParallel() {
  for (auto& hook : impl_->hooks) hook.first->del_post_hook(hook.second);
}

void DataParallel::broadcast_parameters(int root) { impl_->comm.broadcast(impl_->params, root); }

void DataParallel::zero_grad() { impl_->grads.zero_(); }

void DataParallel::prepare_backward(bool sync) {
  Impl& s = *impl_;
  ST_ASSERT(s.next_launch == 0, "DataParallel: prepare_backward() while reductions are pending");
  s.sync = sync;
  if (sync) s.reset_round();
}

void DataParallel::finish_backward() {
  Impl& s = *impl_;
  while (s.next_launch < s.buckets.size()) s.launch(s.next_launch++, false);
  const double start = MPI_Wtime();
  for (auto& work : s.works) work->wait();
  s.stats.seconds_waiting += MPI_Wtime() - start;
  s.sync = false;
  s.reset_round();
}

double DataParallel::step(double lr, double max_grad_norm) {
  Impl& s = *impl_;
  const double norm = max_grad_norm > 0 ? clip_grad_norm(s.grads, max_grad_norm) : std::sqrt(local_sq_norm(s.grads));
  s.adamw->step(s.params, s.grads, s.layout->decay_ranges(), lr);
  return norm;
}

const ParamLayout& DataParallel::layout() const { return *impl_->layout; }

FlatPart DataParallel::checkpoint_part() {
  Impl& s = *impl_;
  const ElementRange shard = s.layout->shard_range(s.comm.rank(), s.comm.size());
  const int64_t numel = s.layout->numel();
  const int64_t begin = std::min(shard.begin, numel);
  const int64_t count = std::min(shard.end, numel) - begin;
  FlatPart part;
  part.begin = begin;
  part.params = s.params.narrow(0, begin, count);
  part.exp_avg = s.adamw->exp_avg().narrow(0, begin, count);
  part.exp_avg_sq = s.adamw->exp_avg_sq().narrow(0, begin, count);
  return part;
}

int64_t DataParallel::optimizer_step() const { return impl_->adamw->step_count(); }

void DataParallel::finish_load(int64_t optimizer_step) {
  Impl& s = *impl_;
  const ElementRange shard = s.layout->shard_range(s.comm.rank(), s.comm.size());
  auto gather = [&](const at::Tensor& full) {
    at::Tensor mine = full.narrow(0, shard.begin, shard.size()).clone();
    s.comm.all_gather(mine, full);
  };
  gather(s.params);
  at::Tensor exp_avg = s.adamw->exp_avg().clone();
  at::Tensor exp_avg_sq = s.adamw->exp_avg_sq().clone();
  gather(exp_avg);
  gather(exp_avg_sq);
  s.adamw->load_state(exp_avg, exp_avg_sq, optimizer_step);
}

const StrategyStats& DataParallel::stats() const { return impl_->stats; }
at::Tensor DataParallel::flat_params() const { return impl_->params; }
at::Tensor DataParallel::flat_grads() const { return impl_->grads; }
std::vector<ElementRange> DataParallel::buckets() const { return impl_->buckets; }

}  // namespace shardtrain
