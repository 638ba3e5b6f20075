// ShardedStrategy built from the model and taken down again (docs/DESIGN.md,
// "Sharded units"): the communicators (shard group, hybrid's nodes), the units
// cut from the model's forward units (plus stage 3's persistent unit), each
// unit's padding and this rank's chunk and segments, the parameters moved into
// the unit buffers, the optimizer and the gradient hooks.
#include "shardtrain/parallel/sharded.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>

#include "parallel/sharded_impl.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain {

void ShardedStrategy::Impl::build_units(const std::vector<std::pair<std::string, at::Tensor>>& named) {
  const int64_t G = group_size;
  const auto& slots = layout->slots();
  std::vector<std::vector<int>> by_forward(model.num_units());
  std::vector<int> persistent;
  for (size_t i = 0; i < slots.size(); ++i) {
    parameters.push_back(named[i].second);
    if (options.stage == 3 && slots[i].numel < options.persistence_threshold)
      persistent.push_back(static_cast<int>(i));
    else
      by_forward[model.unit_of(slots[i].name)].push_back(static_cast<int>(i));
  }
  unit_of_forward.assign(by_forward.size(), -1);
  auto add_unit = [&](const std::vector<int>& unit_slots, bool resident) {
    ShardUnit u;
    u.index = static_cast<int>(units.size());
    u.slots = unit_slots;
    u.resident = resident;
    for (int slot : unit_slots) {
      u.offsets.push_back(u.numel);
      u.numel += slots[slot].numel;
    }
    u.padded = (u.numel + G - 1) / G * G;
    u.chunk = u.padded / G;
    u.shard_offset = shard_numel;
    shard_numel += u.chunk;
    // This rank's chunk of the unit, cut at parameter boundaries.
    const int64_t mine_begin = group_rank * u.chunk, mine_end = mine_begin + u.chunk;
    for (size_t k = 0; k < u.slots.size(); ++k) {
      const ParamSlot& slot = slots[u.slots[k]];
      const int64_t begin = std::max(u.offsets[k], mine_begin);
      const int64_t end = std::min(u.offsets[k] + slot.numel, mine_end);
      if (begin < end)
        segments.push_back({slot.offset + begin - u.offsets[k], u.shard_offset + begin - mine_begin, end - begin});
    }
    units.push_back(std::move(u));
    return static_cast<int>(units.size()) - 1;
  };
  for (size_t f = 0; f < by_forward.size(); ++f) {
    if (by_forward[f].empty()) continue;
    unit_of_forward[f] = add_unit(by_forward[f], options.stage == 2);
    forward_order.push_back(unit_of_forward[f]);
  }
  const int persistent_unit = persistent.empty() ? -1 : add_unit(persistent, true);
  reduce_order.assign(forward_order.rbegin(), forward_order.rend());
  if (persistent_unit >= 0) reduce_order.push_back(persistent_unit);
  unit_of_slot.assign(slots.size(), -1);
  for (const ShardUnit& u : units)
    for (int slot : u.slots) unit_of_slot[slot] = u.index;

  // The parameters move into the unit buffers.
  const at::TensorOptions param_options = named.front().second.options().dtype(options.precision.param_dtype);
  shard_params = at::zeros({shard_numel}, param_options);
  shard_grads = at::zeros({shard_numel}, param_options.dtype(options.precision.reduce_dtype));
  at::NoGradGuard no_grad;
  for (ShardUnit& u : units) {
    u.params = at::zeros({u.padded}, param_options);
    for (size_t k = 0; k < u.slots.size(); ++k) {
      const ParamSlot& slot = slots[u.slots[k]];
      at::Tensor view = u.params.narrow(0, u.offsets[k], slot.numel).view(slot.shape);
      view.copy_(parameters[u.slots[k]].detach());
      parameters[u.slots[k]].set_data(view);
      parameters[u.slots[k]].mutable_grad() = at::Tensor();
    }
    if (frees(u)) add_transient(param_bytes(u.padded));
  }
}

ShardedStrategy::ShardedStrategy(UnitModel& model, Communicator& comm, const AdamWOptions& adamw,
                                 const ShardOptions& options)
    : impl_(std::make_unique<Impl>(comm, model, options, counters())) {
  if (options.stage != 2 && options.stage != 3)
    throw Error(str_format("sharded strategy: stage must be 2 or 3, got %d", options.stage));
  Impl& s = *impl_;
  count_bytes_of(comm);
  const bool hybrid = options.ranks_per_node > 0 && options.ranks_per_node < comm.size();
  if (hybrid) {
    NodeGroups groups = split_into_nodes(comm, options.ranks_per_node);  // Error when it does not divide
    s.gather_comm = std::move(groups.intra);
    s.inter = std::move(groups.inter);
  } else {
    s.gather_comm = comm.split(0, comm.rank());
  }
  s.reduce_comm = s.gather_comm->split(0, s.gather_comm->rank());
  for (const Communicator* c : {s.gather_comm.get(), s.reduce_comm.get(), s.inter.get()})
    if (c) count_bytes_of(*c);
  s.group_rank = s.gather_comm->rank();
  s.group_size = s.gather_comm->size();

  const auto named = trainable_parameters(model, "ShardedStrategy");
  s.layout = std::make_unique<ParamLayout>(named);
  s.build_units(named);
  s.shard_decay = shard_decay_ranges(*s.layout, s.segments);
  s.optimizer = std::make_unique<ShardOptimizer>(s.shard_params, adamw, options.offload_optimizer,
                                                 options.force_offload_copies);
  s.hooks = std::make_unique<GradientReadyHooks>(
      s.parameters, [&s](size_t slot) { s.on_gradient(slot); }, "ShardedStrategy");
  model.set_unit_hooks(&s);
}

ShardedStrategy::~ShardedStrategy() {
  Impl& s = *impl_;
  s.model.set_unit_hooks(nullptr);
  // In-flight collectives write into our buffers: finish them first.
  for (ShardUnit& u : s.units)
    for (std::unique_ptr<Work>* work : {&u.gather_work, &u.reduce_work, &u.inter_work})
      if (*work) (*work)->wait();
  // The model outlives us and holds gathered units' storage, which NCCL
  // recorded on our communicators' streams: move it into fresh memory while
  // those streams still exist (freeing the old block needs them).
  at::NoGradGuard no_grad;
  for (ShardUnit& u : s.units) {
    if (u.grads.defined()) s.drop_grads(u);
    if (u.param_state() == ParamState::kFreed) continue;
    const at::Tensor values = u.params.clone();
    free_storage(u.params);
    allocate_storage(u.params);
    u.params.copy_(values);
  }
}

}  // namespace shardtrain
