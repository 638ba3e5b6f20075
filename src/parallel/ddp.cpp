#include "shardtrain/parallel/ddp.h"

#include <ATen/ATen.h>

#include <cmath>

#include "parallel/flat_model.h"
#include "parallel/gradient_buckets.h"
#include "parallel/shard_map.h"
#include "shardtrain/comm/communicator.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/optim/clip.h"

namespace shardtrain {

struct DataParallel::Impl {
  Communicator& comm;
  StrategyStats& stats;
  FlatModel flat;
  std::unique_ptr<AdamW> adamw;
  std::unique_ptr<GradientBuckets> buckets;

  Impl(Communicator& c, StrategyStats& counters) : comm(c), stats(counters) {}
};

DataParallel::DataParallel(UnitModel& model, Communicator& comm, const AdamWOptions& adamw, const DdpOptions& options)
    : impl_(std::make_unique<Impl>(comm, counters())) {
  if (!(options.bucket_cap_mb > 0))
    throw Error(str_format("parallel.bucket_cap_mb must be > 0, got %g", options.bucket_cap_mb));
  Impl& s = *impl_;
  count_bytes_of(comm);
  s.flat = flatten_model(model, comm.size(), "DataParallel");
  s.adamw = std::make_unique<AdamW>(s.flat.padded_numel, adamw, s.flat.params.options());
  s.buckets = all_reduce_buckets(s.flat, options.bucket_cap_mb, comm, s.stats);
}

DataParallel::~DataParallel() = default;  // GradientBuckets removes the hooks

void DataParallel::broadcast_parameters(int root) { impl_->comm.broadcast(impl_->flat.params, root); }

void DataParallel::zero_grad() { impl_->flat.grads.zero_(); }

void DataParallel::prepare_backward(bool sync) { impl_->buckets->prepare(sync); }

void DataParallel::finish_backward() { impl_->buckets->finish(); }

double DataParallel::step(double lr, double max_grad_norm) {
  Impl& s = *impl_;
  const double norm =
      max_grad_norm > 0 ? clip_grad_norm(s.flat.grads, max_grad_norm) : std::sqrt(local_sq_norm(s.flat.grads));
  s.adamw->step(s.flat.params, s.flat.grads, s.flat.layout->decay_ranges(), lr);
  return norm;
}

const ParamLayout& DataParallel::layout() const { return *impl_->flat.layout; }

std::vector<FlatPart> DataParallel::checkpoint_parts() {
  Impl& s = *impl_;
  // Every rank holds everything; each writes an equal 1/W so all write in parallel.
  const ElementRange window = s.flat.layout->shard_range(s.comm.rank(), s.comm.size());
  const at::Tensor params = s.flat.params;
  return shard_parts(window_segments(*s.flat.layout, window, window.begin),
                     [&params](const ShardSegment& g) { return params.narrow(0, g.layout_begin, g.count); }, *s.adamw);
}

int64_t DataParallel::optimizer_step() const { return impl_->adamw->step_count(); }

void DataParallel::finish_load(int64_t optimizer_step) {
  Impl& s = *impl_;
  const ElementRange shard = s.flat.layout->shard_range(s.comm.rank(), s.comm.size());
  auto gather = [&](const at::Tensor& full) {
    at::Tensor mine = full.narrow(0, shard.begin, shard.size()).clone();
    s.comm.all_gather(mine, full);
  };
  gather(s.flat.params);
  at::Tensor exp_avg = s.adamw->exp_avg().clone();
  at::Tensor exp_avg_sq = s.adamw->exp_avg_sq().clone();
  gather(exp_avg);
  gather(exp_avg_sq);
  s.adamw->load_state(exp_avg, exp_avg_sq, optimizer_step);
}

StrategyMemory DataParallel::memory() const {
  const int64_t n = impl_->flat.padded_numel;
  StrategyMemory m;
  m.param_bytes = n * 4;
  m.grad_bytes = n * 4;
  m.optimizer_bytes = 2 * n * 4;
  return m;
}

at::Tensor DataParallel::flat_params() const { return impl_->flat.params; }
const AdamW& DataParallel::optimizer() const { return *impl_->adamw; }
at::Tensor DataParallel::flat_grads() const { return impl_->flat.grads; }
std::vector<ElementRange> DataParallel::buckets() const { return impl_->buckets->buckets(); }

}  // namespace shardtrain
