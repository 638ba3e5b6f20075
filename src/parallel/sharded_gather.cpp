// A unit's parameters (docs/DESIGN.md, "Sharded units"): all-gathered from the
// shard into the unit buffer, freed again (stage 3), and prefetched: the
// gathers of the next units in execution order launched while a unit
// computes. When they run is decided by the hooks (sharded_hooks.cpp) and the
// step (sharded.cpp).
#include <algorithm>

#include "parallel/sharded_impl.h"

namespace shardtrain {

void ShardedStrategy::Impl::launch_gather(ShardUnit& u, bool prefetched) {
  allocate_storage(u.params);
  if (frees(u)) add_transient(param_bytes(u.padded));
  u.set(ParamState::kGathering);
  u.gather_work = gather_comm->all_gather_async(shard_of(u, shard_params), u.params);
  ++stats.gathers_total;
  if (prefetched) ++stats.gathers_prefetched;
  if (!options.overlap_comm) complete_gather(u);
}

void ShardedStrategy::Impl::complete_gather(ShardUnit& u) {
  wait(*u.gather_work);
  u.gather_work.reset();
  u.set(ParamState::kGathered);
}

void ShardedStrategy::Impl::ensure_gathered(ShardUnit& u) {
  if (u.param_state() == ParamState::kFreed) launch_gather(u, false);
  if (u.param_state() == ParamState::kGathering) complete_gather(u);
}

// Launches the all-gathers of the resident units from the shard buffer and waits for them.
void ShardedStrategy::Impl::gather_resident() {
  for (ShardUnit& u : units)
    if (u.resident) launch_gather(u, false);
  for (ShardUnit& u : units)
    if (u.param_state() == ParamState::kGathering) complete_gather(u);
}

void ShardedStrategy::Impl::free_unit(ShardUnit& u) {
  if (u.param_state() == ParamState::kFreed) return;
  if (u.param_state() == ParamState::kGathering) complete_gather(u);  // MPI may still write into it
  free_storage(u.params);
  transient_bytes -= param_bytes(u.padded);
  u.set(ParamState::kFreed);
}

// Launches the gathers of the units after `u` in forward order (or before
// it, for backward) until `budget` elements are in flight.
void ShardedStrategy::Impl::prefetch(const ShardUnit& u, int64_t budget, bool backward) {
  if (budget <= 0 || options.stage != 3) return;
  const auto at = std::find(forward_order.begin(), forward_order.end(), u.index);
  if (at == forward_order.end()) return;
  int64_t position = at - forward_order.begin();
  int64_t elements = 0;
  while (elements < budget) {
    position += backward ? -1 : 1;
    if (position < 0 || position >= static_cast<int64_t>(forward_order.size())) break;
    ShardUnit& next = units[forward_order[position]];
    if (next.param_state() == ParamState::kFreed) launch_gather(next, true);
    elements += next.numel;
  }
}

}  // namespace shardtrain
