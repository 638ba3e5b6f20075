#include "shardtrain/parallel/ddp.h"

#include <ATen/ATen.h>

#include <cmath>

#include "parallel/flat_model.h"
#include "parallel/gradient_buckets.h"
#include "parallel/shard_map.h"
#include "parallel/shard_optimizer.h"
#include "shardtrain/comm/communicator.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/optim/clip.h"

namespace shardtrain {

struct DataParallel::Impl {
  Communicator& comm;
  StrategyStats& stats;
  FlatModel flat;
  std::unique_ptr<ShardOptimizer> optimizer;  // over the whole buffer
  std::unique_ptr<GradientBuckets> buckets;

  Impl(Communicator& c, StrategyStats& counters) : comm(c), stats(counters) {}
};

DataParallel::DataParallel(UnitModel& model, Communicator& comm, const AdamWOptions& adamw, const DdpOptions& options)
    : impl_(std::make_unique<Impl>(comm, counters())) {
  if (!(options.bucket_cap_mb > 0))
    throw Error(str_format("parallel.bucket_cap_mb must be > 0, got %g", options.bucket_cap_mb));
  if (options.precision.reduce_dtype != options.precision.param_dtype)
    throw Error("ddp reduces the gradients in the parameters' dtype: a reduce dtype other than the parameter dtype "
                "needs a sharded strategy (parallel.fsdp.reduce_dtype with FULL_SHARD or SHARD_GRAD_OP)");
  Impl& s = *impl_;
  count_bytes_of(comm);
  s.flat = flatten_model(model, comm.size(), options.precision.param_dtype, "DataParallel");
  s.optimizer = std::make_unique<ShardOptimizer>(s.flat.params, adamw, /*offload=*/false, /*force_copies=*/false);
  s.buckets = all_reduce_buckets(s.flat, options.bucket_cap_mb, comm, s.stats);
}

DataParallel::~DataParallel() = default;  // GradientBuckets removes the hooks

void DataParallel::broadcast_parameters(int root) {
  impl_->comm.broadcast(impl_->flat.params, root);
  impl_->optimizer->load_master(impl_->flat.params);
}

void DataParallel::zero_grad() { impl_->flat.grads.zero_(); }

void DataParallel::prepare_backward(bool sync) { impl_->buckets->prepare(sync); }

void DataParallel::finish_backward() { impl_->buckets->finish(); }

StepOutcome DataParallel::step(const StepRequest& request) {
  Impl& s = *impl_;
  const StepDecision d = decide_step(std::sqrt(local_sq_norm(s.flat.grads)), request);
  if (d.apply) s.optimizer->step(s.flat.params, s.flat.grads, d.grad_scale, s.flat.layout->decay_ranges(), request.lr);
  return {d.grad_norm, d.apply};
}

const ParamLayout& DataParallel::layout() const { return *impl_->flat.layout; }

std::vector<FlatPart> DataParallel::checkpoint_parts() {
  Impl& s = *impl_;
  // Every rank holds everything; each writes an equal 1/W so all write in parallel.
  const ElementRange window = s.flat.layout->shard_range(s.comm.rank(), s.comm.size());
  const at::Tensor master = s.optimizer->master();
  const at::Tensor values = master.defined() ? master : s.flat.params;
  return shard_parts(window_segments(*s.flat.layout, window, window.begin),
                     [&values](const ShardSegment& g) { return values.narrow(0, g.layout_begin, g.count); },
                     s.optimizer->adamw());
}

int64_t DataParallel::optimizer_step() const { return impl_->optimizer->adamw().step_count(); }

void DataParallel::finish_load(int64_t optimizer_step) {
  Impl& s = *impl_;
  const ElementRange shard = s.flat.layout->shard_range(s.comm.rank(), s.comm.size());
  auto gather = [&](const at::Tensor& full) {
    at::Tensor mine = full.narrow(0, shard.begin, shard.size()).clone();
    s.comm.all_gather(mine, full);
  };
  at::Tensor master = s.optimizer->master();
  if (master.defined()) {
    gather(master);
    s.optimizer->store_master(s.flat.params);
  } else {
    gather(s.flat.params);
  }
  AdamW& adamw = s.optimizer->adamw();
  at::Tensor exp_avg = adamw.exp_avg().clone();
  at::Tensor exp_avg_sq = adamw.exp_avg_sq().clone();
  gather(exp_avg);
  gather(exp_avg_sq);
  adamw.load_state(exp_avg, exp_avg_sq, optimizer_step);
}

StrategyMemory DataParallel::memory() const {
  const FlatModel& f = impl_->flat;
  StrategyMemory m;
  m.param_bytes = f.params.numel() * f.params.element_size();
  m.grad_bytes = f.grads.numel() * f.grads.element_size();
  impl_->optimizer->count(m);
  return m;
}

at::Tensor DataParallel::flat_params() const { return impl_->flat.params; }
const AdamW& DataParallel::optimizer() const { return impl_->optimizer->adamw(); }
at::Tensor DataParallel::flat_grads() const { return impl_->flat.grads; }
std::vector<ElementRange> DataParallel::buckets() const { return impl_->buckets->buckets(); }

}  // namespace shardtrain
