#include "shardtrain/parallel/zero.h"

#include <ATen/ATen.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>

#include "parallel/flat_buffers.h"
#include "shardtrain/comm/communicator.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/model/bert.h"
#include "shardtrain/optim/clip.h"
#include "shardtrain/train/train_checkpoint.h"

namespace shardtrain {

struct ZeroStrategy::Impl {
  Communicator& comm;
  ZeroOptions options;
  FlatModel flat;
  ElementRange shard;
  at::Tensor shard_grads;  // view of flat.grads
  at::Tensor master;       // shard_params(), or its host copy with offload_optimizer on a GPU
  std::unique_ptr<AdamW> adamw;
  std::vector<ElementRange> shard_decay;  // decay ranges relative to shard.begin
  StrategyStats stats;
  int64_t bytes_base = 0;  // comm.stats().bytes_sent when this strategy was built
  std::unique_ptr<GradientBuckets> buckets;

  explicit Impl(Communicator& c) : comm(c) {}

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

ZeroStrategy::ZeroStrategy(BertForSequenceClassification& model, Communicator& comm, const AdamWOptions& adamw,
                           const ZeroOptions& options)
    : impl_(std::make_unique<Impl>(comm)) {
  impl_->bytes_base = comm.stats().bytes_sent;
  if (!(options.bucket_cap_mb > 0))
    throw Error(str_format("parallel.bucket_cap_mb must be > 0, got %g", options.bucket_cap_mb));
  if (options.allgather_bucket_size < 0)
    throw Error("parallel.zero.allgather_bucket_size must be >= 0");
  Impl& s = *impl_;
  s.options = options;
  s.flat = flatten_model(model, comm.size(), "ZeroStrategy");
  s.shard = s.flat.layout->shard_range(comm.rank(), comm.size());
  s.shard_decay = s.flat.layout->decay_ranges_in(s.shard);
  s.shard_grads = s.flat.grads.narrow(0, s.shard.begin, s.shard.size());
  const bool host_master = options.offload_optimizer && !s.flat.params.device().is_cpu();
  s.master = host_master ? s.shard_params().to(at::kCPU).clone() : s.shard_params();
  s.adamw = std::make_unique<AdamW>(s.shard.size(), adamw, s.master.options());
  // The same buckets and all-reduce as DDP, so the gradients are DDP's bit for bit.
  s.buckets = all_reduce_buckets(s.flat, options.bucket_cap_mb, comm, s.stats);
}

ZeroStrategy::~ZeroStrategy() = default;  // GradientBuckets removes the hooks

std::string ZeroStrategy::name() const { return "zero1"; }

void ZeroStrategy::broadcast_parameters(int root) {
  impl_->comm.broadcast(impl_->flat.params, root);
  if (impl_->master.device().is_cpu() && !impl_->flat.params.device().is_cpu())
    impl_->master.copy_(impl_->shard_params());
}

void ZeroStrategy::zero_grad() { impl_->flat.grads.zero_(); }

void ZeroStrategy::prepare_backward(bool sync) { impl_->buckets->prepare(sync); }

void ZeroStrategy::finish_backward() { impl_->buckets->finish(); }

double ZeroStrategy::step(double lr, double max_grad_norm) {
  Impl& s = *impl_;
  // Padding elements of the last shard are zero in every rank's gradient, so
  // they add nothing to the norm and AdamW leaves the padded params at zero
  // (m = v = 0, update 0).
  const double norm = max_grad_norm > 0 ? clip_grad_norm(s.shard_grads, max_grad_norm, s.comm)
                                        : global_grad_norm(s.shard_grads, s.comm);
  const bool host_master = s.master.device() != s.flat.params.device();
  s.adamw->step(s.master, host_master ? s.shard_grads.to(at::kCPU) : s.shard_grads, s.shard_decay, lr);
  if (host_master) s.shard_params().copy_(s.master);
  s.gather_params();
  return norm;
}

const ParamLayout& ZeroStrategy::layout() const { return *impl_->flat.layout; }
at::Tensor ZeroStrategy::flat_params() const { return impl_->flat.params; }

FlatPart ZeroStrategy::checkpoint_part() {
  Impl& s = *impl_;
  const int64_t numel = s.flat.layout->numel();
  const int64_t begin = std::min(s.shard.begin, numel);
  const int64_t count = std::min(s.shard.end, numel) - begin;
  FlatPart part;
  part.begin = begin;
  part.params = s.flat.params.narrow(0, begin, count);
  // A shard that starts at or past the layout's end (tiny models, many ranks)
  // has count 0; its AdamW slice starts at 0 either way.
  part.exp_avg = s.adamw->exp_avg().narrow(0, 0, count);
  part.exp_avg_sq = s.adamw->exp_avg_sq().narrow(0, 0, count);
  return part;
}

int64_t ZeroStrategy::optimizer_step() const { return impl_->adamw->step_count(); }

void ZeroStrategy::finish_load(int64_t optimizer_step) {
  Impl& s = *impl_;
  s.gather_params();
  if (s.master.device() != s.flat.params.device()) s.master.copy_(s.shard_params());
  // The AdamW buffers were filled in place through checkpoint_part(); this
  // only sets the step count (load_state copies, so pass copies).
  s.adamw->load_state(s.adamw->exp_avg().clone(), s.adamw->exp_avg_sq().clone(), optimizer_step);
}

const StrategyStats& ZeroStrategy::stats() const {
  impl_->stats.bytes_sent = impl_->comm.stats().bytes_sent - impl_->bytes_base;
  return impl_->stats;
}

std::vector<FlatPart> ZeroStrategy::checkpoint_parts() { return {checkpoint_part()}; }
StrategyMemory ZeroStrategy::memory() const {
  const Impl& s = *impl_;
  StrategyMemory m;
  m.param_bytes = s.flat.padded_numel * 4;
  m.grad_bytes = s.flat.padded_numel * 4;
  m.optimizer_bytes = (s.master.device() != s.flat.params.device() ? 3 : 2) * s.shard.size() * 4;
  return m;
}

ElementRange ZeroStrategy::shard() const { return impl_->shard; }
at::Tensor ZeroStrategy::shard_grads() const { return impl_->shard_grads; }
const AdamW& ZeroStrategy::optimizer() const { return *impl_->adamw; }

}  // namespace shardtrain
