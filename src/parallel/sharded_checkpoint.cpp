// ShardedStrategy's shard in and out (docs/DESIGN.md, "Checkpoints" and
// "Sharded units"): the checkpoint parts this rank writes (hybrid replicas
// split their shard), the state put back together after a checkpoint was
// read (finish_load, hybrid's windows), and the full parameters and gradients
// gathered from the shards for results and tests.
#include "shardtrain/parallel/sharded.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "parallel/sharded_impl.h"

namespace shardtrain {

// Each hybrid replica read its window of a shard-sized buffer from a
// checkpoint; put the windows together (through the shard's device, where
// the communicator works, when the buffer is the host's master copy).
void ShardedStrategy::Impl::gather_windows(at::Tensor& full) {
  const int64_t replicas = inter->size();
  std::vector<int64_t> counts;
  for (int64_t k = 0; k < replicas; ++k)
    counts.push_back(shard_numel * (k + 1) / replicas - shard_numel * k / replicas);
  const int64_t begin = shard_numel * inter->rank() / replicas;
  at::Tensor work = full.device() == shard_grads.device() ? full : full.to(shard_grads.device());
  at::Tensor mine = work.narrow(0, begin, counts[inter->rank()]).clone();
  inter->all_gather_v(mine, work, counts);
  if (!work.is_same(full)) full.copy_(work);
}

at::Tensor ShardedStrategy::flat_params() const {
  Impl& s = *impl_;
  s.settle();
  at::Tensor flat = at::zeros({s.layout->padded_numel(s.comm.size())}, s.shard_params.options());
  for (ShardUnit& u : s.units) {
    const bool was_freed = u.param_state() == ParamState::kFreed;
    s.ensure_gathered(u);
    for (size_t k = 0; k < u.slots.size(); ++k) {
      const ParamSlot& slot = s.layout->slots()[u.slots[k]];
      flat.narrow(0, slot.offset, slot.numel).copy_(u.params.narrow(0, u.offsets[k], slot.numel));
    }
    if (was_freed) s.free_unit(u);
  }
  return flat;
}

at::Tensor ShardedStrategy::gather_grads() const {
  Impl& s = *impl_;
  at::Tensor flat = at::zeros({s.layout->numel()}, s.shard_grads.options());
  for (const ShardUnit& u : s.units) {
    at::Tensor full = at::empty({u.padded}, s.shard_grads.options());
    s.gather_comm->all_gather(s.shard_of(u, s.shard_grads).clone(), full);
    for (size_t k = 0; k < u.slots.size(); ++k) {
      const ParamSlot& slot = s.layout->slots()[u.slots[k]];
      flat.narrow(0, slot.offset, slot.numel).copy_(full.narrow(0, u.offsets[k], slot.numel));
    }
  }
  return flat;
}

std::vector<FlatPart> ShardedStrategy::checkpoint_parts() {
  Impl& s = *impl_;
  s.settle();
  // Hybrid: the replicas of a shard split it, so each element is written once.
  const int64_t replicas = s.inter ? s.inter->size() : 1;
  const int64_t replica = s.inter ? s.inter->rank() : 0;
  const ElementRange window{s.shard_numel * replica / replicas, s.shard_numel * (replica + 1) / replicas};
  // Stage 2: a resident unit's chunk lives in its (gathered) unit buffer; the
  // unit that holds shard element `e` is the one whose chunk contains it.
  const at::Tensor master = s.optimizer->master();
  auto params_of = [&s, &master](const ShardSegment& g) {
    if (master.defined()) return master.narrow(0, g.shard_begin, g.count);
    if (!s.transient_shard()) return s.shard_params.narrow(0, g.shard_begin, g.count);
    const auto unit = std::find_if(s.units.begin(), s.units.end(), [&](const ShardUnit& u) {
      return g.shard_begin >= u.shard_offset && g.shard_begin < u.shard_offset + u.chunk;
    });
    return unit->params.narrow(0, s.group_rank * unit->chunk + (g.shard_begin - unit->shard_offset), g.count);
  };
  return shard_parts(clip_segments(s.segments, window), params_of, s.optimizer->adamw());
}

int64_t ShardedStrategy::optimizer_step() const { return impl_->optimizer->adamw().step_count(); }

void ShardedStrategy::finish_load(int64_t optimizer_step) {
  Impl& s = *impl_;
  s.settle();
  AdamW& adamw = s.optimizer->adamw();
  at::Tensor exp_avg = adamw.exp_avg().clone();
  at::Tensor exp_avg_sq = adamw.exp_avg_sq().clone();
  at::Tensor master = s.optimizer->master();
  if (master.defined()) {
    // The checkpoint was read into the master copy: the parameters are its rounding.
    s.stage_shard(/*copy=*/false);
    if (s.inter) s.gather_windows(master);
    s.optimizer->store_master(s.shard_params);
  } else {
    // The checkpoint parts of resident units were read into the unit buffers.
    s.stage_shard(/*copy=*/true);
    if (s.inter) s.gather_windows(s.shard_params);
    s.optimizer->load_master(s.shard_params);
  }
  if (s.inter) {
    s.gather_windows(exp_avg);
    s.gather_windows(exp_avg_sq);
  }
  adamw.load_state(exp_avg, exp_avg_sq, optimizer_step);
  for (ShardUnit& u : s.units)
    if (!u.resident) s.free_unit(u);
  s.gather_resident();
  s.release_shard();
}

}  // namespace shardtrain
