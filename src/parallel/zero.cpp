#include "shardtrain/parallel/zero.h"

#include <ATen/ATen.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>

#include "parallel/flat_buffers.h"
#include "parallel/offload.h"
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
  std::unique_ptr<AdamW> adamw;         // AdamW on the shard where it is, or
  std::unique_ptr<HostOptimizer> host;  // offload_optimizer: master, gradients and AdamW in host memory
  std::vector<ElementRange> shard_decay;  // decay ranges relative to shard.begin
  StrategyStats stats;
  int64_t bytes_base = 0;  // comm.stats().bytes_sent when this strategy was built
  std::unique_ptr<GradientBuckets> buckets;

  explicit Impl(Communicator& c) : comm(c) {}

  at::Tensor shard_params() const { return flat.params.narrow(0, shard.begin, shard.size()); }
  AdamW& optimizer() const { return host ? host->adamw() : *adamw; }

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
  if (options.offload_optimizer && HostOptimizer::needed(s.shard_params(), options.force_offload_copies))
    s.host = std::make_unique<HostOptimizer>(s.shard_params(), adamw, options.force_offload_copies);
  else
    s.adamw = std::make_unique<AdamW>(s.shard.size(), adamw, s.flat.params.options());
  // The same buckets and all-reduce as DDP, so the gradients are DDP's bit for bit.
  s.buckets = all_reduce_buckets(s.flat, options.bucket_cap_mb, comm, s.stats);
}

ZeroStrategy::~ZeroStrategy() = default;  // GradientBuckets removes the hooks

std::string ZeroStrategy::name() const { return "zero1"; }

void ZeroStrategy::broadcast_parameters(int root) {
  impl_->comm.broadcast(impl_->flat.params, root);
  if (impl_->host) impl_->host->load_master(impl_->shard_params());
}

void ZeroStrategy::zero_grad() {
  if (impl_->host) impl_->host->synchronize();  // a copy of the old gradients may still be reading them
  impl_->flat.grads.zero_();
}

void ZeroStrategy::prepare_backward(bool sync) { impl_->buckets->prepare(sync); }

void ZeroStrategy::finish_backward() { impl_->buckets->finish(); }

double ZeroStrategy::step(double lr, double max_grad_norm) {
  Impl& s = *impl_;
  // Padding elements of the last shard are zero in every rank's gradient, so
  // they add nothing to the norm and AdamW leaves the padded params at zero
  // (m = v = 0, update 0).
  // Offload: the slice goes down to the host in pieces while the norm is computed.
  constexpr int kOffloadPieces = 8;
  if (s.host) s.host->offload_rest(s.shard_grads, kOffloadPieces);
  const double norm = global_grad_norm(s.shard_grads, s.comm);
  const double scale = max_grad_norm > 0 ? clip_coefficient(norm, max_grad_norm) : 1.0;
  if (s.host) {
    s.host->step(s.shard_params(), scale, s.shard_decay, lr);
  } else {
    scale_grads(s.shard_grads, scale);
    s.adamw->step(s.shard_params(), s.shard_grads, s.shard_decay, lr);
  }
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
  part.exp_avg = s.optimizer().exp_avg().narrow(0, 0, count);
  part.exp_avg_sq = s.optimizer().exp_avg_sq().narrow(0, 0, count);
  return part;
}

int64_t ZeroStrategy::optimizer_step() const { return impl_->optimizer().step_count(); }

void ZeroStrategy::finish_load(int64_t optimizer_step) {
  Impl& s = *impl_;
  s.gather_params();
  if (s.host) s.host->load_master(s.shard_params());
  // The AdamW buffers were filled in place through checkpoint_part(); this
  // only sets the step count (load_state copies, so pass copies).
  AdamW& adamw = s.optimizer();
  adamw.load_state(adamw.exp_avg().clone(), adamw.exp_avg_sq().clone(), optimizer_step);
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
  m.optimizer_bytes = 2 * s.shard.size() * 4;
  if (s.host) s.host->count(m);
  return m;
}

ElementRange ZeroStrategy::shard() const { return impl_->shard; }
at::Tensor ZeroStrategy::shard_grads() const { return impl_->shard_grads; }
const AdamW& ZeroStrategy::optimizer() const { return impl_->optimizer(); }

}  // namespace shardtrain
