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
  int stage = 1;
  FlatModel flat;
  ElementRange shard;
  at::Tensor shard_grads;  // stage 1: view of flat.grads; stage 2: its own buffer
  std::unique_ptr<AdamW> adamw;
  std::vector<ElementRange> shard_decay;  // decay ranges relative to shard.begin
  StrategyStats stats;
  std::unique_ptr<GradientBuckets> buckets;  // stage 1 only

  explicit Impl(Communicator& c) : comm(c) {}

  at::Tensor shard_params() const { return flat.params.narrow(0, shard.begin, shard.size()); }

  // Every rank's parameter shard into every rank's full buffer. all_gather
  // needs an input that does not alias its output, hence the copy.
  void gather_params() {
    at::Tensor mine = shard_params().clone();
    comm.all_gather(mine, flat.params);
  }
};

ZeroStrategy::ZeroStrategy(BertForSequenceClassification& model, Communicator& comm, const AdamWOptions& adamw,
                           const ZeroOptions& options)
    : impl_(std::make_unique<Impl>(comm)) {
  if (options.stage != 1 && options.stage != 2)
    throw Error(str_format("ZeRO stage must be 1 or 2 here, got %d (stage 3 is not available yet)", options.stage));
  if (!(options.bucket_cap_mb > 0))
    throw Error(str_format("parallel.bucket_cap_mb must be > 0, got %g", options.bucket_cap_mb));
  Impl& s = *impl_;
  s.stage = options.stage;
  s.flat = flatten_model(model, comm.size(), "ZeroStrategy");
  s.shard = s.flat.layout->shard_range(comm.rank(), comm.size());
  s.shard_decay = s.flat.layout->decay_ranges_in(s.shard);
  s.adamw = std::make_unique<AdamW>(s.shard.size(), adamw, s.flat.params.options());
  if (s.stage == 1) {
    s.shard_grads = s.flat.grads.narrow(0, s.shard.begin, s.shard.size());
    at::Tensor grads = s.flat.grads;
    // The same buckets and all-reduce as DDP, so stage 1's gradients are DDP's bit for bit.
    s.buckets = std::make_unique<GradientBuckets>(
        s.flat, options.bucket_cap_mb,
        [&comm, grads](ElementRange r) {
          return comm.all_reduce_async(grads.narrow(0, r.begin, r.size()), ReduceOp::kAvg);
        },
        s.stats);
  } else {
    s.shard_grads = at::zeros({s.shard.size()}, s.flat.grads.options());
  }
}

ZeroStrategy::~ZeroStrategy() = default;  // GradientBuckets removes the hooks

std::string ZeroStrategy::name() const { return impl_->stage == 1 ? "zero1" : "zero2"; }
int ZeroStrategy::stage() const { return impl_->stage; }

void ZeroStrategy::broadcast_parameters(int root) { impl_->comm.broadcast(impl_->flat.params, root); }

void ZeroStrategy::zero_grad() {
  impl_->flat.grads.zero_();
  if (impl_->stage == 2) impl_->shard_grads.zero_();
}

void ZeroStrategy::prepare_backward(bool sync) {
  // Stage 2 reduces nothing during backward: micro-steps accumulate locally
  // whatever `sync` says, and finish_backward() reduce-scatters the sum.
  if (impl_->buckets) impl_->buckets->prepare(sync);
}

void ZeroStrategy::finish_backward() {
  Impl& s = *impl_;
  if (s.buckets) {
    s.buckets->finish();
    return;
  }
  std::unique_ptr<Work> work = s.comm.reduce_scatter_async(s.flat.grads, s.shard_grads, ReduceOp::kAvg);
  ++s.stats.buckets_total;
  const double start = MPI_Wtime();
  work->wait();
  s.stats.seconds_waiting += MPI_Wtime() - start;
}

double ZeroStrategy::step(double lr, double max_grad_norm) {
  Impl& s = *impl_;
  // Padding elements of the last shard are zero in every rank's gradient, so
  // they add nothing to the norm and AdamW leaves the padded params at zero
  // (m = v = 0, update 0).
  const double norm = max_grad_norm > 0 ? clip_grad_norm(s.shard_grads, max_grad_norm, s.comm)
                                        : global_grad_norm(s.shard_grads, s.comm);
  s.adamw->step(s.shard_params(), s.shard_grads, s.shard_decay, lr);
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
  // The AdamW buffers were filled in place through checkpoint_part(); this
  // only sets the step count (load_state copies, so pass copies).
  s.adamw->load_state(s.adamw->exp_avg().clone(), s.adamw->exp_avg_sq().clone(), optimizer_step);
}

const StrategyStats& ZeroStrategy::stats() const { return impl_->stats; }
ElementRange ZeroStrategy::shard() const { return impl_->shard; }
at::Tensor ZeroStrategy::shard_grads() const { return impl_->shard_grads; }
const AdamW& ZeroStrategy::optimizer() const { return *impl_->adamw; }

}  // namespace shardtrain
