// What ShardedStrategy does inside forward and backward (docs/DESIGN.md,
// "Sharded units"): the model's UnitHooks gather a unit before its forward and
// free it after (stage 3); a hook on the unit's output gathers it again before
// its backward; the gradient-ready hooks count down each unit's parameters
// and, when its backward is done, launch its reduction. Every hook drives MPI
// progress (poll): MPI moves the collectives in flight only inside MPI calls.
#include <ATen/core/grad_mode.h>

#include "parallel/sharded_impl.h"

namespace shardtrain {

void ShardedStrategy::Impl::before_forward(int64_t forward_unit) {
  settle();
  const int index = unit_of_forward[forward_unit];
  if (index < 0) return;
  ensure_gathered(units[index]);
  prefetch(units[index], options.forward_prefetch_elements, false);
  poll();
}

at::Tensor ShardedStrategy::Impl::after_forward(int64_t forward_unit, at::Tensor output) {
  const int index = unit_of_forward[forward_unit];
  if (index < 0) return output;
  const bool backward_follows = at::GradMode::is_enabled() && output.requires_grad();
  if (backward_follows) output.register_hook([this, index](const at::Tensor&) { pre_backward(units[index]); });
  // The last unit's backward comes right after its forward: keep it (as FSDP
  // keeps the root unit).
  const bool last = index == forward_order.back();  // index >= 0: forward_order is not empty
  if (options.stage == 3 && frees(units[index]) && !(backward_follows && last)) free_unit(units[index]);
  return output;
}

void ShardedStrategy::Impl::pre_backward(ShardUnit& u) {
  if (options.stage == 3) ensure_gathered(u);
  attach_grads(u);
  if (!options.backward_prefetch_post) prefetch(u, options.backward_prefetch_elements, true);
  poll();
}

void ShardedStrategy::Impl::on_gradient(size_t slot) {
  ShardUnit& u = units[unit_of_slot[slot]];
  if (u.pending <= 0) return;  // a backward outside prepare_backward()
  if (--u.pending == 0)
    post_backward(u);
  else
    poll();  // MPI moves the in-flight gathers and reduce-scatters only inside MPI calls
}

void ShardedStrategy::Impl::post_backward(ShardUnit& u) {
  if (round.reduces) u.set(GradState::kReady);  // else the full gradients stay and accumulate (no_sync)
  if (options.stage == 3 && frees(u)) free_unit(u);
  // Hybrid: the units whose reduce-scatter went out at an earlier hook
  // have had a unit's backward to complete it; average them across nodes.
  const size_t reduces_launched = round.next_reduce;
  if (round.reduces) launch_ready_reduces(true);
  if (round.reduces && inter && round.last) launch_inters_before(reduces_launched);
  if (options.backward_prefetch_post) prefetch(u, options.backward_prefetch_elements, true);
  poll();
}

// Drives MPI progress and retires the collectives that finished.
void ShardedStrategy::Impl::poll() {
  for (ShardUnit& u : units)
    if (u.param_state() == ParamState::kGathering && u.gather_work->test()) {
      u.gather_work.reset();
      u.set(ParamState::kGathered);
    }
  for (int index : reduce_order) {
    ShardUnit& u = units[index];
    if (u.grad_state() == GradState::kReducing && u.reduce_work->test()) complete_reduce(u);
    if (u.grad_state() == GradState::kAveraging && u.inter_work->test()) complete_inter(u);
  }
}

}  // namespace shardtrain
