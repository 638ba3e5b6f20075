// About 700 lines, one file on purpose: the step's phases and the unit hooks
// act on the same units from both sides (parameters gathered and freed,
// gradients reduced and averaged) and share one round state; split, one
// state machine would be spread over several files. What stands alone is
// elsewhere: the units' states and transitions (shard_units.h), which
// elements a shard holds (shard_map.h), the DeepSpeed / FSDP knobs
// (shard_policy.h) and optimizer offload (offload.h).
#include "shardtrain/parallel/sharded.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>

#include "parallel/flat_model.h"
#include "parallel/shard_map.h"
#include "parallel/shard_optimizer.h"
#include "parallel/shard_units.h"
#include "shardtrain/comm/communicator.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/model/unit_model.h"
#include "shardtrain/optim/clip.h"

namespace shardtrain {
namespace {

enum class Phase { kUnsettled, kIdle, kBackward, kReduced };

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::kUnsettled: return "unsettled";
    case Phase::kIdle: return "idle";
    case Phase::kBackward: return "backward";
    case Phase::kReduced: return "reduced";
  }
  return "?";
}

// The step's phases, in one place (sharded.h lists what each means).
bool allowed(Phase from, Phase to) {
  switch (from) {
    case Phase::kUnsettled: return to == Phase::kIdle;
    case Phase::kIdle: return to == Phase::kIdle || to == Phase::kBackward;
    case Phase::kBackward: return to == Phase::kBackward || to == Phase::kReduced;
    case Phase::kReduced: return to == Phase::kIdle;
  }
  return false;
}

}  // namespace

struct ShardedStrategy::Impl : public UnitHooks {
  Communicator& comm;
  UnitModel& model;
  ShardOptions options;
  // First, so they are destroyed last: NCCL records its streams on the buffers
  // it reads and writes, and a buffer freed after its stream is gone fails.
  std::unique_ptr<Communicator> gather_comm;  // the shard group (all-gathers)
  std::unique_ptr<Communicator> reduce_comm;  // the shard group again (reduce-scatters, norms)
  std::unique_ptr<Communicator> inter;        // hybrid: ranks holding the same shard
  std::unique_ptr<ParamLayout> layout;
  std::vector<at::Tensor> parameters;  // the module's parameters, layout order
  std::vector<ShardUnit> units;
  std::vector<int> unit_of_slot;
  std::vector<int> unit_of_forward;  // model unit -> units index, -1 when it has no parameters left
  std::vector<int> forward_order;    // units in forward order (the persistent unit is not in it)
  std::vector<int> reduce_order;     // backward order, the persistent unit last

  Phase phase = Phase::kUnsettled;
  // The open backward round (phase kBackward).
  struct Round {
    bool reduces = true;     // units reduce-scatter in this round (sync, or DeepSpeed's every micro-step)
    bool last = true;        // this round's reductions complete the step's gradients
    size_t next_reduce = 0;  // reduce_order position of the next reduce-scatter to launch
    size_t next_inter = 0;   // hybrid: reduce_order position of the next cross-node average
  } round;

  int group_rank = 0, group_size = 1;
  int64_t shard_numel = 0;
  at::Tensor shard_params;  // param_dtype, on the model's device: gathers read it
  at::Tensor shard_grads;   // reduce_dtype
  std::unique_ptr<ShardOptimizer> optimizer;
  std::vector<ShardSegment> segments;  // the layout elements of the shard
  std::vector<ElementRange> shard_decay;

  StrategyStats& stats;
  int64_t transient_bytes = 0, peak_transient_bytes = 0;
  std::unique_ptr<GradientReadyHooks> hooks;

  Impl(Communicator& c, UnitModel& m, const ShardOptions& o, StrategyStats& counters)
      : comm(c), model(m), options(o), stats(counters) {}

  void advance(Phase to) {
    ST_ASSERT(allowed(phase, to), std::string("ShardedStrategy: ") + phase_name(phase) + " -> " + phase_name(to));
    phase = to;
  }

  bool frees(const ShardUnit& u) const { return !u.resident; }
  HostOptimizer* host() const { return optimizer->host(); }
  // The shard's fp32 values live outside shard_params (mixed precision's master copy).
  bool has_master() const { return optimizer->master().defined(); }
  int64_t param_bytes(int64_t elements) const { return elements * shard_params.element_size(); }

  // Stage 2 keeps every unit gathered, so this rank's chunk of each is already
  // in the unit buffers: the shard buffer exists only during step() and
  // finish_load() (4 Psi + 12 Psi/N bytes held, as ZeRO counts stage 2).
  bool transient_shard() const { return options.stage == 2; }

  at::Tensor shard_of(const ShardUnit& u, const at::Tensor& shard) const {
    return shard.narrow(0, u.shard_offset, u.chunk);
  }
  at::Tensor own_chunk(const ShardUnit& u) const { return u.params.narrow(0, group_rank * u.chunk, u.chunk); }

  void add_transient(int64_t bytes_added) {
    transient_bytes += bytes_added;
    peak_transient_bytes = std::max(peak_transient_bytes, transient_bytes);
  }

  double wait(Work& work) {
    const double start = MPI_Wtime();
    work.wait();
    const double waited = MPI_Wtime() - start;
    stats.seconds_waiting += waited;
    return waited;
  }

  // The shard buffer, with (stage 2, `copy`) every unit's chunk copied in from
  // the unit buffers.
  void stage_shard(bool copy) {
    if (transient_shard()) {
      allocate_storage(shard_params);
      add_transient(param_bytes(shard_numel));
    }
    // Otherwise the shard buffer itself holds the chunks (and checkpoints read into it).
    if (!copy || !transient_shard()) return;
    for (const ShardUnit& u : units)
      if (u.resident) shard_of(u, shard_params).copy_(own_chunk(u));
  }

  void release_shard() {
    if (!transient_shard()) return;
    free_storage(shard_params);
    transient_bytes -= param_bytes(shard_numel);
  }

  // Takes this rank's chunks of the initial full units and frees what stage 3 frees.
  void settle() {
    if (phase != Phase::kUnsettled) return;
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
    advance(Phase::kIdle);
  }

  // ---- parameters ----
  void launch_gather(ShardUnit& u, bool prefetched) {
    allocate_storage(u.params);
    if (frees(u)) add_transient(param_bytes(u.padded));
    u.set(ParamState::kGathering);
    u.gather_work = gather_comm->all_gather_async(shard_of(u, shard_params), u.params);
    ++stats.gathers_total;
    if (prefetched) ++stats.gathers_prefetched;
    if (!options.overlap_comm) complete_gather(u);
  }

  void complete_gather(ShardUnit& u) {
    wait(*u.gather_work);
    u.gather_work.reset();
    u.set(ParamState::kGathered);
  }

  void ensure_gathered(ShardUnit& u) {
    if (u.param_state() == ParamState::kFreed) launch_gather(u, false);
    if (u.param_state() == ParamState::kGathering) complete_gather(u);
  }

  // Each hybrid replica read its window of a shard-sized buffer from a
  // checkpoint; put the windows together (through the shard's device, where
  // the communicator works, when the buffer is the host's master copy).
  void gather_windows(at::Tensor& full) {
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

  // Launches the all-gathers of the resident units from the shard buffer and waits for them.
  void gather_resident() {
    for (ShardUnit& u : units)
      if (u.resident) launch_gather(u, false);
    for (ShardUnit& u : units)
      if (u.param_state() == ParamState::kGathering) complete_gather(u);
  }

  void free_unit(ShardUnit& u) {
    if (u.param_state() == ParamState::kFreed) return;
    if (u.param_state() == ParamState::kGathering) complete_gather(u);  // MPI may still write into it
    free_storage(u.params);
    transient_bytes -= param_bytes(u.padded);
    u.set(ParamState::kFreed);
  }

  // Launches the gathers of the units after `u` in forward order (or before
  // it, for backward) until `budget` elements are in flight.
  void prefetch(const ShardUnit& u, int64_t budget, bool backward) {
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

  // Drives MPI progress and retires the collectives that finished.
  void poll() {
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

  // ---- gradients ----
  void attach_grads(ShardUnit& u) {
    if (u.grad_state() != GradState::kNone) return;
    u.grads = at::zeros({u.padded}, shard_params.options());
    add_transient(param_bytes(u.padded));
    for (size_t k = 0; k < u.slots.size(); ++k) {
      const ParamSlot& slot = layout->slots()[u.slots[k]];
      parameters[u.slots[k]].mutable_grad() = u.grads.narrow(0, u.offsets[k], slot.numel).view(slot.shape);
    }
    u.set(GradState::kAccumulating);
  }

  void drop_grads(ShardUnit& u) {
    for (int slot : u.slots) parameters[slot].mutable_grad() = at::Tensor();
    u.grads = at::Tensor();
    transient_bytes -= param_bytes(u.padded);
  }

  void launch_reduce(ShardUnit& u, bool from_hook) {
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

  void complete_reduce(ShardUnit& u) {
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
  void launch_inters_before(size_t end) {
    for (; round.next_inter < end; ++round.next_inter) {
      ShardUnit& u = units[reduce_order[round.next_inter]];
      if (u.grad_state() == GradState::kReducing) complete_reduce(u);
      u.set(GradState::kAveraging);
      u.inter_work = inter->all_reduce_async(shard_of(u, shard_grads), ReduceOp::kAvg);
      if (!options.overlap_comm) complete_inter(u);
    }
  }

  void complete_inter(ShardUnit& u) {
    wait(*u.inter_work);
    u.inter_work.reset();
    u.set(GradState::kNone);
    if (host()) host()->offload_grads(shard_grads, u.shard_offset, u.chunk);
  }

  // Queues the host copy of every unit chunk not queued yet (offload).
  void offload_rest() {
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
  void launch_ready_reduces(bool from_hook, bool flush = false) {
    size_t ready = round.next_reduce;
    int64_t elements = 0;
    while (ready < reduce_order.size() && units[reduce_order[ready]].grad_state() == GradState::kReady)
      elements += units[reduce_order[ready++]].numel;
    if (ready == round.next_reduce) return;
    if (!flush && elements < options.reduce_bucket_elements) return;
    for (; round.next_reduce < ready; ++round.next_reduce) launch_reduce(units[reduce_order[round.next_reduce]], from_hook);
  }

  // Closes a round that reduces: every unit's reduce-scatter launched and
  // complete. A unit whose backward did not run (or not fully) takes part with
  // what it has: every rank issues every reduce-scatter of the round.
  void finish_reducing_round() {
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

  // ---- hooks ----
  void before_forward(int64_t forward_unit) override {
    settle();
    const int index = unit_of_forward[forward_unit];
    if (index < 0) return;
    ensure_gathered(units[index]);
    prefetch(units[index], options.forward_prefetch_elements, false);
    poll();
  }

  at::Tensor after_forward(int64_t forward_unit, at::Tensor output) override {
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

  void pre_backward(ShardUnit& u) {
    if (options.stage == 3) ensure_gathered(u);
    attach_grads(u);
    if (!options.backward_prefetch_post) prefetch(u, options.backward_prefetch_elements, true);
    poll();
  }

  void on_gradient(size_t slot) {
    ShardUnit& u = units[unit_of_slot[slot]];
    if (u.pending <= 0) return;  // a backward outside prepare_backward()
    if (--u.pending == 0)
      post_backward(u);
    else
      poll();  // MPI moves the in-flight gathers and reduce-scatters only inside MPI calls
  }

  void post_backward(ShardUnit& u) {
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

  // ---- construction ----
  void build_units(const std::vector<std::pair<std::string, at::Tensor>>& named);
};

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

std::string ShardedStrategy::name() const {
  if (impl_->inter) return "hybrid";
  return impl_->options.stage == 2 ? "zero2" : "zero3";
}

void ShardedStrategy::broadcast_parameters(int root) {
  Impl& s = *impl_;
  // Once settled, the shards are one model already, the same for every rank.
  if (s.phase != Phase::kUnsettled) return;
  for (const ShardUnit& u : s.units) s.comm.broadcast(u.params, root);
  s.settle();
}

void ShardedStrategy::zero_grad() {
  Impl& s = *impl_;
  s.settle();
  ST_ASSERT(s.phase != Phase::kBackward, "ShardedStrategy::zero_grad() inside a backward round");
  s.optimizer->synchronize();  // a copy of the old gradients may still be reading them
  s.shard_grads.zero_();
  for (ShardUnit& u : s.units)
    if (u.grad_state() == GradState::kAccumulating) {
      s.drop_grads(u);
      u.set(GradState::kNone);
    }
  s.advance(Phase::kIdle);
}

void ShardedStrategy::prepare_backward(bool sync) {
  Impl& s = *impl_;
  s.settle();
  // Reducing every micro-step: the previous micro-step's reductions finish first.
  if (s.phase == Phase::kBackward && s.round.reduces) s.finish_reducing_round();
  s.advance(Phase::kBackward);
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
  ST_ASSERT(s.phase == Phase::kBackward, std::string("ShardedStrategy::finish_backward() in phase ") +
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
  s.advance(Phase::kReduced);
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
    s.advance(Phase::kIdle);
    return {d.grad_norm, false};
  }
  // A master copy (mixed precision, or offload's host master) holds every
  // chunk and the step writes the shard from it; without one AdamW updates the
  // staged shard in place.
  s.stage_shard(/*copy=*/!s.host() && !s.has_master());
  s.optimizer->step(s.shard_params, s.shard_grads, d.grad_scale, s.shard_decay, request.lr);
  s.gather_resident();
  s.release_shard();
  s.advance(Phase::kIdle);
  return {d.grad_norm, true};
}

const ParamLayout& ShardedStrategy::layout() const { return *impl_->layout; }

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
