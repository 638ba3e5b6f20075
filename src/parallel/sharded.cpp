// ShardedStrategy's step: its four phases and the checks on them, the shard
// buffer staged for a step, and the Strategy calls that move from phase to
// phase (docs/DESIGN.md, "Sharded units" and "One optimizer step"). The
// state these act on is sharded_impl.h; the hooks that run inside forward and
// backward are sharded_hooks.cpp.
#include "shardtrain/parallel/sharded.h"

#include <ATen/core/grad_mode.h>
#include <mpi.h>

#include <algorithm>
#include <string>

#include "parallel/sharded_impl.h"
#include "shardtrain/core/check.h"
#include "shardtrain/optim/clip.h"

namespace shardtrain {
namespace {

const char* phase_name(ShardedPhase phase) {
  switch (phase) {
    case ShardedPhase::kUnsettled: return "unsettled";
    case ShardedPhase::kIdle: return "idle";
    case ShardedPhase::kBackward: return "backward";
    case ShardedPhase::kReduced: return "reduced";
  }
  return "?";
}

// The step's phases, in one place (sharded.h lists what each means).
bool allowed(ShardedPhase from, ShardedPhase to) {
  switch (from) {
    case ShardedPhase::kUnsettled: return to == ShardedPhase::kIdle;
    case ShardedPhase::kIdle: return to == ShardedPhase::kIdle || to == ShardedPhase::kBackward;
    case ShardedPhase::kBackward: return to == ShardedPhase::kBackward || to == ShardedPhase::kReduced;
    case ShardedPhase::kReduced: return to == ShardedPhase::kIdle;
  }
  return false;
}

}  // namespace

void ShardedStrategy::Impl::advance(ShardedPhase to) {
  ST_ASSERT(allowed(phase, to), std::string("ShardedStrategy: ") + phase_name(phase) + " -> " + phase_name(to));
  phase = to;
}

double ShardedStrategy::Impl::wait(Work& work) {
  const double start = MPI_Wtime();
  work.wait();
  const double waited = MPI_Wtime() - start;
  stats.seconds_waiting += waited;
  return waited;
}

// The shard buffer, with (stage 2, `copy`) every unit's chunk copied in from
// the unit buffers.
void ShardedStrategy::Impl::stage_shard(bool copy) {
  if (transient_shard()) {
    allocate_storage(shard_params);
    add_transient(param_bytes(shard_numel));
  }
  // Otherwise the shard buffer itself holds the chunks (and checkpoints read into it).
  if (!copy || !transient_shard()) return;
  for (const ShardUnit& u : units)
    if (u.resident) shard_of(u, shard_params).copy_(own_chunk(u));
}

void ShardedStrategy::Impl::release_shard() {
  if (!transient_shard()) return;
  free_storage(shard_params);
  transient_bytes -= param_bytes(shard_numel);
}

// Takes this rank's chunks of the initial full units and frees what stage 3 frees.
void ShardedStrategy::Impl::settle() {
  if (phase != ShardedPhase::kUnsettled) return;
  at::NoGradGuard no_grad;
  for (ShardUnit& u : units) {
    shard_of(u, shard_params).copy_(own_chunk(u));
    if (frees(u)) free_unit(u);
  }
  optimizer->load_master(shard_params);
  if (transient_shard()) {
    transient_bytes += param_bytes(shard_numel);  // counted as staged since construction
    release_shard();
  }
  peak_transient_bytes = transient_bytes;
  advance(ShardedPhase::kIdle);
}

std::string ShardedStrategy::name() const {
  if (impl_->inter) return "hybrid";
  return impl_->options.stage == 2 ? "zero2" : "zero3";
}

void ShardedStrategy::broadcast_parameters(int root) {
  Impl& s = *impl_;
  // Once settled, the shards are one model already, the same for every rank.
  if (s.phase != ShardedPhase::kUnsettled) return;
  for (const ShardUnit& u : s.units) s.comm.broadcast(u.params, root);
  s.settle();
}

void ShardedStrategy::zero_grad() {
  Impl& s = *impl_;
  s.settle();
  ST_ASSERT(s.phase != ShardedPhase::kBackward, "ShardedStrategy::zero_grad() inside a backward round");
  s.optimizer->synchronize();  // a copy of the old gradients may still be reading them
  s.shard_grads.zero_();
  for (ShardUnit& u : s.units)
    if (u.grad_state() == GradState::kAccumulating) {
      s.drop_grads(u);
      u.set(GradState::kNone);
    }
  s.advance(ShardedPhase::kIdle);
}

void ShardedStrategy::prepare_backward(bool sync) {
  Impl& s = *impl_;
  s.settle();
  // Reducing every micro-step: the previous micro-step's reductions finish first.
  if (s.phase == ShardedPhase::kBackward && s.round.reduces) s.finish_reducing_round();
  s.advance(ShardedPhase::kBackward);
  s.round = Impl::Round{};
  s.round.last = sync;
  s.round.reduces = sync || s.options.reduce_every_micro_step;
  for (ShardUnit& u : s.units) u.pending = static_cast<int>(u.slots.size());
  // The persistent unit has no forward of its own: its gradients are
  // accumulated by many units' backward.
  ShardUnit& last = s.units[s.reduce_order.back()];
  if (last.resident && std::find(s.forward_order.begin(), s.forward_order.end(), last.index) == s.forward_order.end())
    s.attach_grads(last);
}

void ShardedStrategy::finish_backward() {
  Impl& s = *impl_;
  ST_ASSERT(s.phase == ShardedPhase::kBackward, std::string("ShardedStrategy::finish_backward() in phase ") +
                                                    phase_name(s.phase) + " (no prepare_backward())");
  ST_ASSERT(s.round.last, "ShardedStrategy::finish_backward() after prepare_backward(false): the step's last "
                          "micro-step must be prepare_backward(true)");
  s.finish_reducing_round();
  if (s.inter) {
    s.launch_inters_before(s.reduce_order.size());
    for (int index : s.reduce_order)
      if (s.units[index].grad_state() == GradState::kAveraging) s.complete_inter(s.units[index]);
  }
  if (s.host()) s.offload_rest();
  if (s.options.stage == 3)
    for (ShardUnit& u : s.units)
      if (s.frees(u)) s.free_unit(u);
  s.advance(ShardedPhase::kReduced);
}

StepOutcome ShardedStrategy::step(const StepRequest& request) {
  Impl& s = *impl_;
  s.settle();
  // Unit padding is zero in every rank's gradient: it adds nothing to the
  // norm, and AdamW leaves the padded parameters at zero.
  const StepDecision d = decide_step(global_grad_norm(s.shard_grads, *s.reduce_comm), request);
  if (s.host()) s.offload_rest();  // a step without a finished backward
  if (!d.apply) {
    s.optimizer->discard();
    s.advance(ShardedPhase::kIdle);
    return {d.grad_norm, false};
  }
  // A master copy (mixed precision, or offload's host master) holds every
  // chunk and the step writes the shard from it; without one AdamW updates the
  // staged shard in place.
  s.stage_shard(/*copy=*/!s.host() && !s.has_master());
  s.optimizer->step(s.shard_params, s.shard_grads, d.grad_scale, s.shard_decay, request.lr);
  s.gather_resident();
  s.release_shard();
  s.advance(ShardedPhase::kIdle);
  return {d.grad_norm, true};
}

const ParamLayout& ShardedStrategy::layout() const { return *impl_->layout; }

StrategyMemory ShardedStrategy::memory() const {
  const Impl& s = *impl_;
  StrategyMemory m;
  m.param_bytes = s.transient_shard() ? 0 : s.param_bytes(s.shard_numel);
  m.grad_bytes = s.shard_numel * s.shard_grads.element_size();
  for (const ShardUnit& u : s.units) {
    if (u.resident) m.param_bytes += s.param_bytes(u.padded);
    if (u.grads.defined()) m.grad_bytes += s.param_bytes(u.padded);  // kept across no_sync micro-steps
  }
  s.optimizer->count(m);
  m.peak_transient_bytes = s.peak_transient_bytes;
  return m;
}

int64_t ShardedStrategy::num_units() const { return static_cast<int64_t>(impl_->units.size()); }
int64_t ShardedStrategy::shard_numel() const { return impl_->shard_numel; }
at::Tensor ShardedStrategy::shard_grads() const { return impl_->shard_grads; }
const AdamW& ShardedStrategy::optimizer() const { return impl_->optimizer->adamw(); }

}  // namespace shardtrain
