#include "shardtrain/parallel/zero1.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "parallel/flat_model.h"
#include "parallel/gradient_buckets.h"
#include "parallel/shard_map.h"
#include "parallel/shard_optimizer.h"
#include "shardtrain/comm/communicator.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/optim/clip.h"

namespace shardtrain {

struct ZeroStrategy::Impl {
  Communicator& comm;
  ZeroOptions options;
  FlatModel flat;
  ElementRange shard;
  std::vector<ShardSegment> segments;  // the layout elements of the shard
  at::Tensor shard_grads;              // view of flat.grads
  std::unique_ptr<ShardOptimizer> optimizer;
  std::vector<ElementRange> shard_decay;  // decay ranges relative to shard.begin
  StrategyStats& stats;
  std::unique_ptr<GradientBuckets> buckets;

  Impl(Communicator& c, StrategyStats& counters) : comm(c), stats(counters) {}

  at::Tensor shard_params() const { return flat.params.narrow(0, shard.begin, shard.size()); }

  // Every rank's parameter shard into every rank's full buffer, in pieces of
  // allgather_bucket_size elements per rank when set. all_gather needs an
  // input that does not alias its output, hence the copy.
  void gather_params() {
    const int64_t per_rank = shard.size();
    const int64_t piece = options.allgather_bucket_size > 0 ? std::min(options.allgather_bucket_size, per_rank)
                                                             : per_rank;
    if (piece == per_rank) {
      comm.all_gather(shard_params().clone(), flat.params);
      return;
    }
    const int world = comm.size();
    at::Tensor staging = at::empty({piece * world}, flat.params.options());
    for (int64_t begin = 0; begin < per_rank; begin += piece) {
      const int64_t count = std::min(piece, per_rank - begin);
      at::Tensor out = staging.narrow(0, 0, count * world);
      comm.all_gather(shard_params().narrow(0, begin, count).clone(), out);
      for (int r = 0; r < world; ++r)
        flat.params.narrow(0, r * per_rank + begin, count).copy_(out.narrow(0, r * count, count));
    }
  }
};

ZeroStrategy::ZeroStrategy(UnitModel& model, Communicator& comm, const AdamWOptions& adamw, const ZeroOptions& options)
    : impl_(std::make_unique<Impl>(comm, counters())) {
  if (!(options.bucket_cap_mb > 0))
    throw Error(str_format("parallel.bucket_cap_mb must be > 0, got %g", options.bucket_cap_mb));
  if (options.allgather_bucket_size < 0) throw Error("parallel.zero.allgather_bucket_size must be >= 0");
  if (options.precision.reduce_dtype != options.precision.param_dtype)
    throw Error("zero1 reduces the gradients in the parameters' dtype (DeepSpeed's 16-bit reduction); a reduce "
                "dtype other than the parameter dtype needs zero2, zero3 or fsdp");
  Impl& s = *impl_;
  count_bytes_of(comm);
  s.options = options;
  s.flat = flatten_model(model, comm.size(), options.precision.param_dtype, "ZeroStrategy");
  s.shard = s.flat.layout->shard_range(comm.rank(), comm.size());
  s.segments = window_segments(*s.flat.layout, s.shard, 0);
  s.shard_decay = shard_decay_ranges(*s.flat.layout, s.segments);
  s.shard_grads = s.flat.grads.narrow(0, s.shard.begin, s.shard.size());
  s.optimizer = std::make_unique<ShardOptimizer>(s.shard_params(), adamw, options.offload_optimizer,
                                                 options.force_offload_copies);
  s.buckets = reduce_scatter_buckets(s.flat, options.bucket_cap_mb, comm, s.stats);
}

ZeroStrategy::~ZeroStrategy() = default;  // GradientBuckets removes the hooks

std::string ZeroStrategy::name() const { return "zero1"; }

void ZeroStrategy::broadcast_parameters(int root) {
  impl_->comm.broadcast(impl_->flat.params, root);
  impl_->optimizer->load_master(impl_->shard_params());
}

void ZeroStrategy::zero_grad() {
  impl_->optimizer->synchronize();  // a copy of the old gradients may still be reading them
  impl_->flat.grads.zero_();
}

void ZeroStrategy::prepare_backward(bool sync) { impl_->buckets->prepare(sync); }

void ZeroStrategy::finish_backward() { impl_->buckets->finish(); }

StepOutcome ZeroStrategy::step(const StepRequest& request) {
  Impl& s = *impl_;
  // Padding elements of the last shard are zero in every rank's gradient, so
  // they add nothing to the norm and AdamW leaves the padded params at zero
  // (m = v = 0, update 0).
  // Offload: the slice goes down to the host in pieces while the norm is computed.
  constexpr int kOffloadPieces = 8;
  if (HostOptimizer* host = s.optimizer->host()) host->offload_rest(s.shard_grads, kOffloadPieces);
  const StepDecision d = decide_step(global_grad_norm(s.shard_grads, s.comm), request);
  if (!d.apply) {
    s.optimizer->discard();
    return {d.grad_norm, false};
  }
  s.optimizer->step(s.shard_params(), s.shard_grads, d.grad_scale, s.shard_decay, request.lr);
  s.gather_params();
  return {d.grad_norm, true};
}

const ParamLayout& ZeroStrategy::layout() const { return *impl_->flat.layout; }
at::Tensor ZeroStrategy::flat_params() const { return impl_->flat.params; }

std::vector<FlatPart> ZeroStrategy::checkpoint_parts() {
  Impl& s = *impl_;
  const at::Tensor params = s.flat.params, master = s.optimizer->master();
  return shard_parts(s.segments,
                     [&](const ShardSegment& g) {
                       return master.defined() ? master.narrow(0, g.shard_begin, g.count)
                                               : params.narrow(0, g.layout_begin, g.count);
                     },
                     s.optimizer->adamw());
}

int64_t ZeroStrategy::optimizer_step() const { return impl_->optimizer->adamw().step_count(); }

void ZeroStrategy::finish_load(int64_t optimizer_step) {
  Impl& s = *impl_;
  // A checkpoint was read into the parameters' shard, or (mixed precision) into the master.
  if (s.optimizer->master().defined())
    s.optimizer->store_master(s.shard_params());
  else
    s.optimizer->load_master(s.shard_params());
  s.gather_params();
  // The AdamW buffers were filled in place through checkpoint_parts(); this
  // only sets the step count (load_state copies, so pass copies).
  AdamW& adamw = s.optimizer->adamw();
  adamw.load_state(adamw.exp_avg().clone(), adamw.exp_avg_sq().clone(), optimizer_step);
}

StrategyMemory ZeroStrategy::memory() const {
  const Impl& s = *impl_;
  StrategyMemory m;
  m.param_bytes = s.flat.params.numel() * s.flat.params.element_size();
  m.grad_bytes = s.flat.grads.numel() * s.flat.grads.element_size();
  s.optimizer->count(m);
  return m;
}

ElementRange ZeroStrategy::shard() const { return impl_->shard; }
at::Tensor ZeroStrategy::shard_grads() const { return impl_->shard_grads; }
const AdamW& ZeroStrategy::optimizer() const { return impl_->optimizer->adamw(); }

}  // namespace shardtrain
