// A unit's gradients (docs/DESIGN.md, "Sharded units" and "Mixed precision"):
// the full gradient buffer attached for its backward, reduce-scattered in
// reduce_order once its backward is done (grouped by reduce_bucket_size when
// set), hybrid's cross-node average of the reduced chunk, each final chunk's
// copy to the host (offload), and the close of a backward round.
#include <ATen/ATen.h>

#include "parallel/sharded_impl.h"

namespace shardtrain {

void ShardedStrategy::Impl::attach_grads(ShardUnit& u) {
  if (u.grad_state() != GradState::kNone) return;
  u.grads = at::zeros({u.padded}, shard_params.options());
  add_transient(param_bytes(u.padded));
  for (size_t k = 0; k < u.slots.size(); ++k) {
    const ParamSlot& slot = layout->slots()[u.slots[k]];
    parameters[u.slots[k]].mutable_grad() = u.grads.narrow(0, u.offsets[k], slot.numel).view(slot.shape);
  }
  u.set(GradState::kAccumulating);
}

void ShardedStrategy::Impl::drop_grads(ShardUnit& u) {
  for (int slot : u.slots) parameters[slot].mutable_grad() = at::Tensor();
  u.grads = at::Tensor();
  transient_bytes -= param_bytes(u.padded);
}

void ShardedStrategy::Impl::launch_reduce(ShardUnit& u, bool from_hook) {
  // FSDP's reduce_dtype: the unit's gradients go out in it (a transient
  // copy when it differs from the parameters' dtype).
  const at::Tensor input = u.grads.to(shard_grads.scalar_type());
  u.reduced = at::empty({u.chunk}, shard_grads.options());
  u.set(GradState::kReducing);
  u.reduce_work = reduce_comm->reduce_scatter_async(input, u.reduced, ReduceOp::kAvg);
  stats.buckets_total += 1;
  stats.buckets_during_backward += from_hook ? 1 : 0;
  if (!options.overlap_comm) complete_reduce(u);
}

void ShardedStrategy::Impl::complete_reduce(ShardUnit& u) {
  wait(*u.reduce_work);
  u.reduce_work.reset();
  shard_of(u, shard_grads).add_(u.reduced);
  u.reduced = at::Tensor();
  drop_grads(u);
  if (inter && round.last) {
    u.set(GradState::kReduced);  // waits for its cross-node average
    return;
  }
  u.set(GradState::kNone);
  // Offload: the unit's gradient chunk is final; its copy to the host
  // overlaps the backward of the units still computing.
  if (host() && round.last) host()->offload_grads(shard_grads, u.shard_offset, u.chunk);
}

// Hybrid: the cross-node averages of the units before position `end` of
// reduce_order, each after its reduce-scatter (waited for if still in
// flight). Called from the hooks and finish_backward only, never when a
// test() happens to succeed, so every rank launches its collectives on all
// communicators in the same order (NCCL needs that).
void ShardedStrategy::Impl::launch_inters_before(size_t end) {
  for (; round.next_inter < end; ++round.next_inter) {
    ShardUnit& u = units[reduce_order[round.next_inter]];
    if (u.grad_state() == GradState::kReducing) complete_reduce(u);
    u.set(GradState::kAveraging);
    u.inter_work = inter->all_reduce_async(shard_of(u, shard_grads), ReduceOp::kAvg);
    if (!options.overlap_comm) complete_inter(u);
  }
}

void ShardedStrategy::Impl::complete_inter(ShardUnit& u) {
  wait(*u.inter_work);
  u.inter_work.reset();
  u.set(GradState::kNone);
  if (host()) host()->offload_grads(shard_grads, u.shard_offset, u.chunk);
}

// Queues the host copy of every unit chunk not queued yet (offload).
void ShardedStrategy::Impl::offload_rest() {
  for (int index : reduce_order) {
    const ShardUnit& u = units[index];
    if (!host()->offloaded(u.shard_offset)) host()->offload_grads(shard_grads, u.shard_offset, u.chunk);
  }
}

// Reduce-scatters in reduce_order only, so every rank issues the same
// collectives in the same order whatever order its hooks fire in. With a
// reduce bucket (DeepSpeed reduce_bucket_size) ready units wait until
// together they hold that many elements, then go out together; `flush`
// launches whatever is ready.
void ShardedStrategy::Impl::launch_ready_reduces(bool from_hook, bool flush) {
  size_t ready = round.next_reduce;
  int64_t elements = 0;
  while (ready < reduce_order.size() && units[reduce_order[ready]].grad_state() == GradState::kReady)
    elements += units[reduce_order[ready++]].numel;
  if (ready == round.next_reduce) return;
  if (!flush && elements < options.reduce_bucket_elements) return;
  for (; round.next_reduce < ready; ++round.next_reduce)
    launch_reduce(units[reduce_order[round.next_reduce]], from_hook);
}

// Closes a round that reduces: every unit's reduce-scatter launched and
// complete. A unit whose backward did not run (or not fully) takes part with
// what it has: every rank issues every reduce-scatter of the round.
void ShardedStrategy::Impl::finish_reducing_round() {
  for (ShardUnit& u : units) {
    const bool not_run = u.pending > 0;  // its backward of this round did not finish (or start)
    if (!not_run) continue;              // ready or beyond already (kNone: reduced this round)
    attach_grads(u);
    u.pending = 0;
    u.set(GradState::kReady);
  }
  launch_ready_reduces(false, /*flush=*/true);
  for (int index : reduce_order)
    if (units[index].grad_state() == GradState::kReducing) complete_reduce(units[index]);
}

}  // namespace shardtrain
