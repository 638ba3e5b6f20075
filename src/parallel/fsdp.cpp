#include "shardtrain/parallel/fsdp.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/StorageImpl.h>
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
namespace {

// FSDP's trick for freeing a gathered unit: its parameters stay tensors with
// their shapes (autograd holds on to them for backward), only the memory
// under them goes. Gathering again allocates new memory under the same
// storage, so every view and every tensor autograd saved sees the new values.
void free_storage(const at::Tensor& t) {
  c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
  if (impl->nbytes() == 0) return;
  impl->set_data_ptr_noswap(impl->allocator()->allocate(0));
  impl->set_nbytes(0);
}

void allocate_storage(const at::Tensor& t) {
  c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
  const size_t nbytes = static_cast<size_t>(t.numel()) * t.element_size();
  if (impl->nbytes() == nbytes) return;
  impl->set_data_ptr_noswap(impl->allocator()->allocate(nbytes));
  impl->set_nbytes(nbytes);
}

}  // namespace

struct ShardedStrategy::Impl : public UnitHooks {
  struct Unit {
    std::vector<int> slots;       // layout slots, in layout order
    std::vector<int64_t> offsets;  // each slot's first element in the unit buffers
    int64_t numel = 0, padded = 0, chunk = 0, shard_offset = 0;
    bool resident = false;        // parameters never freed
    at::Tensor params;            // [padded]; storage freed while not gathered
    at::Tensor grads;             // [padded] during backward; undefined otherwise
    at::Tensor reduced;           // [chunk] reduce-scatter output while in flight
    bool gathered = true;
    std::unique_ptr<Work> gather_work;
    std::unique_ptr<Work> reduce_work;
    std::unique_ptr<Work> inter_work;  // hybrid: the chunk's average across nodes, in flight
    int pending = 0;              // slots whose gradient this backward has not accumulated yet
    bool backward_done = false;
  };

  Communicator& comm;
  BertForSequenceClassification& model;
  ShardOptions options;
  // First, so they are destroyed last: NCCL records its streams on the buffers
  // it reads and writes, and a buffer freed after its stream is gone fails.
  std::unique_ptr<Communicator> gather_comm;  // the shard group (all-gathers)
  std::unique_ptr<Communicator> reduce_comm;  // the shard group again (reduce-scatters, norms)
  std::unique_ptr<Communicator> inter;        // hybrid: ranks holding the same shard
  std::unique_ptr<ParamLayout> layout;
  std::vector<at::Tensor> parameters;  // the module's parameters, layout order
  std::vector<Unit> units;
  std::vector<int> unit_of_slot;
  std::vector<int> unit_of_forward;  // model unit -> units index, -1 when it has no parameters left
  std::vector<int> forward_order;    // units in forward order (the persistent unit is not in it)
  std::vector<int> reduce_order;     // backward order, the persistent unit last
  size_t next_reduce = 0;
  size_t next_inter = 0;  // hybrid: next unit (reduce_order) whose chunk is averaged across nodes
  bool sync = true;
  bool round_open = false;  // a backward with reduction started and not finished
  bool final_round = true;  // this backward's reductions complete the step's gradients

  int group_rank = 0, group_size = 1;

  int64_t shard_numel = 0;
  at::Tensor shard_params;  // fp32, on the model's device: gathers read it
  at::Tensor shard_grads;
  std::unique_ptr<AdamW> adamw;         // AdamW on the shard where it is, or
  std::unique_ptr<HostOptimizer> host;  // offload_optimizer: master, gradients and AdamW in host memory
  std::vector<ElementRange> shard_decay;

  StrategyStats stats;
  int64_t bytes_base = 0;
  int64_t transient_bytes = 0, peak_transient_bytes = 0;
  std::unique_ptr<GradientReadyHooks> hooks;
  // Until broadcast_parameters() (or first use), every unit holds this rank's
  // own full initial values: only root's full copy can be broadcast.
  bool unsettled = true;

  Impl(Communicator& c, BertForSequenceClassification& m, const ShardOptions& o) : comm(c), model(m), options(o) {}

  bool frees(const Unit& u) const { return !u.resident; }

  AdamW& optimizer() const { return host ? host->adamw() : *adamw; }

  // Stage 2 keeps every unit gathered, so this rank's chunk of each is already
  // in the unit buffers: the shard buffer exists only during step() and
  // finish_load() (4 Psi + 12 Psi/N bytes held, as ZeRO counts stage 2).
  bool transient_shard() const { return options.stage == 2; }

  // The shard buffer, with (stage 2, `copy`) every unit's chunk copied in from
  // the unit buffers.
  void stage_shard(bool copy) {
    if (transient_shard()) {
      allocate_storage(shard_params);
      add_transient(shard_numel * 4);
    }
    // Otherwise the shard buffer itself holds the chunks (and checkpoints read into it).
    if (!copy || !transient_shard()) return;
    for (const Unit& u : units)
      if (u.resident) shard_of(u, shard_params).copy_(u.params.narrow(0, group_rank * u.chunk, u.chunk));
  }

  void release_shard() {
    if (!transient_shard()) return;
    free_storage(shard_params);
    transient_bytes -= shard_numel * 4;
  }

  // Launches the all-gathers of the resident units from the shard buffer and waits for them.
  void gather_resident() {
    for (size_t index = 0; index < units.size(); ++index)
      if (units[index].resident) launch_gather(static_cast<int>(index), false);
    for (Unit& u : units) {
      if (!u.gather_work) continue;
      wait(*u.gather_work);
      u.gather_work.reset();
      u.gathered = true;
    }
  }

  // Takes this rank's chunks of the initial full units and frees what stage 3 frees.
  void settle() {
    if (!unsettled) return;
    unsettled = false;
    at::NoGradGuard no_grad;
    for (size_t index = 0; index < units.size(); ++index) {
      Unit& u = units[index];
      shard_of(u, shard_params).copy_(u.params.narrow(0, group_rank * u.chunk, u.chunk));
      if (frees(u)) free_unit(static_cast<int>(index));
    }
    if (host) host->load_master(shard_params);
    if (transient_shard()) {
      transient_bytes += shard_numel * 4;  // counted as staged since construction
      release_shard();
    }
    peak_transient_bytes = transient_bytes;
  }

  void add_transient(int64_t bytes) {
    transient_bytes += bytes;
    peak_transient_bytes = std::max(peak_transient_bytes, transient_bytes);
  }

  double wait(Work& work) {
    const double start = MPI_Wtime();
    work.wait();
    const double waited = MPI_Wtime() - start;
    stats.seconds_waiting += waited;
    return waited;
  }

  at::Tensor shard_of(const Unit& u, const at::Tensor& shard) const {
    return shard.narrow(0, u.shard_offset, u.chunk);
  }

  // ---- parameters ----
  void launch_gather(int index, bool prefetched) {
    Unit& u = units[index];
    allocate_storage(u.params);
    if (frees(u)) add_transient(u.padded * 4);
    u.gather_work = gather_comm->all_gather_async(shard_of(u, shard_params), u.params);
    ++stats.gathers_total;
    if (prefetched) ++stats.gathers_prefetched;
    if (!options.overlap_comm) wait(*u.gather_work);
  }

  void ensure_gathered(int index) {
    Unit& u = units[index];
    if (u.gathered) return;
    if (!u.gather_work) launch_gather(index, false);
    wait(*u.gather_work);
    u.gather_work.reset();
    u.gathered = true;
  }

  void free_unit(int index) {
    Unit& u = units[index];
    if (!u.gathered && !u.gather_work) return;
    if (u.gather_work) wait(*u.gather_work);  // MPI may still write into it
    u.gather_work.reset();
    free_storage(u.params);
    transient_bytes -= u.padded * 4;
    u.gathered = false;
  }

  // Launches the gathers of the units after `position` in `order` (forward
  // order, or reversed for backward) until `budget` elements are in flight.
  void prefetch(int index, int64_t budget, bool backward) {
    if (budget <= 0 || options.stage != 3) return;
    const auto at = std::find(forward_order.begin(), forward_order.end(), index);
    if (at == forward_order.end()) return;
    int64_t position = at - forward_order.begin();
    int64_t elements = 0;
    while (elements < budget) {
      position += backward ? -1 : 1;
      if (position < 0 || position >= static_cast<int64_t>(forward_order.size())) break;
      Unit& next = units[forward_order[position]];
      if (!next.gathered && !next.gather_work) launch_gather(forward_order[position], true);
      elements += next.numel;
    }
  }

  // Drives MPI progress and retires the collectives that finished.
  void poll() {
    for (Unit& u : units) {
      if (u.gather_work && u.gather_work->test()) {
        u.gather_work.reset();
        u.gathered = true;
      }
    }
    for (int index : reduce_order) {
      Unit& u = units[index];
      if (u.reduce_work && u.reduce_work->test()) complete_reduce(index);
      if (u.inter_work && u.inter_work->test()) complete_inter(index);
    }
  }

  // ---- gradients ----
  void attach_grads(int index) {
    Unit& u = units[index];
    if (u.grads.defined()) return;
    u.grads = at::zeros({u.padded}, shard_params.options());
    add_transient(u.padded * 4);
    for (size_t k = 0; k < u.slots.size(); ++k) {
      const ParamSlot& slot = layout->slots()[u.slots[k]];
      parameters[u.slots[k]].mutable_grad() = u.grads.narrow(0, u.offsets[k], slot.numel).view(slot.shape);
    }
  }

  void detach_grads(int index) {
    Unit& u = units[index];
    if (!u.grads.defined()) return;
    for (int slot : u.slots) parameters[slot].mutable_grad() = at::Tensor();
    u.grads = at::Tensor();
    transient_bytes -= u.padded * 4;
  }

  void launch_reduce(int index, bool from_hook) {
    Unit& u = units[index];
    u.reduced = at::empty({u.chunk}, u.grads.options());
    u.reduce_work = reduce_comm->reduce_scatter_async(u.grads, u.reduced, ReduceOp::kAvg);
    ++stats.buckets_total;
    if (from_hook) ++stats.buckets_during_backward;
    if (!options.overlap_comm) complete_reduce(index);
  }

  void complete_reduce(int index) {
    Unit& u = units[index];
    wait(*u.reduce_work);
    u.reduce_work.reset();
    shard_of(u, shard_grads).add_(u.reduced);
    u.reduced = at::Tensor();
    detach_grads(index);
    // Offload: the unit's gradient chunk is final (hybrid: once it is
    // averaged across the nodes too); its copy to the host overlaps the
    // backward of the units still computing.
    if (host && final_round && !inter) host->offload_grads(shard_grads, u.shard_offset, u.chunk);
  }

  // Hybrid: the cross-node averages of the units before position `end` of
  // reduce_order, each after its reduce-scatter (waited for if still in
  // flight). Called from the hooks and finish_backward only, never when a
  // test() happens to succeed, so every rank launches its collectives on all
  // communicators in the same order (NCCL needs that).
  void launch_inters_before(size_t end) {
    for (; next_inter < end; ++next_inter) {
      const int index = reduce_order[next_inter];
      Unit& u = units[index];
      if (u.reduce_work) complete_reduce(index);
      u.inter_work = inter->all_reduce_async(shard_of(u, shard_grads), ReduceOp::kAvg);
      if (!options.overlap_comm) complete_inter(index);
    }
  }

  void complete_inter(int index) {
    Unit& u = units[index];
    wait(*u.inter_work);
    u.inter_work.reset();
    if (host) host->offload_grads(shard_grads, u.shard_offset, u.chunk);
  }

  // Queues the host copy of every unit chunk not queued yet (offload).
  void offload_rest() {
    for (int index : reduce_order) {
      const Unit& u = units[index];
      if (!host->offloaded(u.shard_offset)) host->offload_grads(shard_grads, u.shard_offset, u.chunk);
    }
  }

  // Reduce-scatters in reduce_order only, so every rank issues the same
  // collectives in the same order whatever order its hooks fire in. With a
  // reduce bucket (DeepSpeed reduce_bucket_size) ready units wait until
  // together they hold that many elements, then go out together; `flush`
  // launches whatever is ready.
  void launch_ready_reduces(bool from_hook, bool flush = false) {
    size_t ready = next_reduce;
    int64_t elements = 0;
    while (ready < reduce_order.size() && units[reduce_order[ready]].backward_done)
      elements += units[reduce_order[ready++]].numel;
    if (ready == next_reduce) return;
    if (!flush && elements < options.reduce_bucket_elements) return;
    for (; next_reduce < ready; ++next_reduce) launch_reduce(reduce_order[next_reduce], from_hook);
  }

  // Every unit's reduce-scatter of this backward launched and complete. A unit
  // whose backward did not run (or not fully) takes part with what it has:
  // every rank issues every reduce-scatter of the round.
  void finish_round() {
    for (size_t index = 0; index < units.size(); ++index) {
      Unit& u = units[index];
      if (u.backward_done) continue;
      attach_grads(static_cast<int>(index));
      u.backward_done = true;
    }
    launch_ready_reduces(false, /*flush=*/true);
    for (int index : reduce_order)
      if (units[index].reduce_work) complete_reduce(index);
    round_open = false;
  }

  // ---- hooks ----
  void before_forward(int64_t forward_unit) override {
    settle();
    const int index = unit_of_forward[forward_unit];
    if (index < 0) return;
    ensure_gathered(index);
    prefetch(index, options.forward_prefetch_elements, false);
    poll();
  }

  at::Tensor after_forward(int64_t forward_unit, at::Tensor output) override {
    const int index = unit_of_forward[forward_unit];
    if (index < 0) return output;
    const bool backward_follows = at::GradMode::is_enabled() && output.requires_grad();
    if (backward_follows) output.register_hook([this, index](const at::Tensor&) { pre_backward(index); });
    // The last unit's backward comes right after its forward: keep it (as FSDP
    // keeps the root unit).
    const bool last = index == forward_order.back();  // index >= 0: forward_order is not empty
    if (options.stage == 3 && frees(units[index]) && !(backward_follows && last)) free_unit(index);
    return output;
  }

  void pre_backward(int index) {
    if (options.stage == 3) ensure_gathered(index);
    attach_grads(index);
    if (!options.backward_prefetch_post) prefetch(index, options.backward_prefetch_elements, true);
    poll();
  }

  void on_gradient(size_t slot) {
    Unit& u = units[unit_of_slot[slot]];
    if (u.pending <= 0) return;  // a backward outside prepare_backward()
    if (--u.pending == 0)
      post_backward(unit_of_slot[slot]);
    else
      poll();  // MPI moves the in-flight gathers and reduce-scatters only inside MPI calls
  }

  void post_backward(int index) {
    Unit& u = units[index];
    u.backward_done = true;
    if (options.stage == 3 && frees(u)) free_unit(index);
    // Hybrid: the units whose reduce-scatter went out at an earlier hook
    // have had a unit's backward to complete it; average them across nodes.
    const size_t reduces_launched = next_reduce;
    if (sync) launch_ready_reduces(true);
    if (sync && inter && final_round) launch_inters_before(reduces_launched);
    if (options.backward_prefetch_post) prefetch(index, options.backward_prefetch_elements, true);
    poll();
  }
};

ShardedStrategy::ShardedStrategy(BertForSequenceClassification& model, Communicator& comm, const AdamWOptions& adamw,
                                 const ShardOptions& options)
    : impl_(std::make_unique<Impl>(comm, model, options)) {
  if (options.stage != 2 && options.stage != 3)
    throw Error(str_format("sharded strategy: stage must be 2 or 3, got %d", options.stage));
  Impl& s = *impl_;
  s.bytes_base = comm.stats().bytes_sent;
  const bool hybrid = options.ranks_per_node > 0 && options.ranks_per_node < comm.size();
  if (hybrid) {
    NodeGroups groups = split_into_nodes(comm, options.ranks_per_node);  // Error when it does not divide
    s.gather_comm = std::move(groups.intra);
    s.inter = std::move(groups.inter);
  } else {
    s.gather_comm = comm.split(0, comm.rank());
  }
  s.reduce_comm = s.gather_comm->split(0, s.gather_comm->rank());
  s.group_rank = s.gather_comm->rank();
  s.group_size = s.gather_comm->size();
  const int64_t G = s.group_size;

  // ---- units ----
  const auto named = model.state_dict();
  s.layout = std::make_unique<ParamLayout>(named);
  const auto& slots = s.layout->slots();
  std::vector<std::vector<int>> by_forward(model.num_units());
  std::vector<int> persistent;
  for (size_t i = 0; i < slots.size(); ++i) {
    ST_ASSERT(named[i].second.requires_grad(), "ShardedStrategy: parameter " + named[i].first + " does not require grad");
    s.parameters.push_back(named[i].second);
    if (options.stage == 3 && slots[i].numel < options.persistence_threshold)
      persistent.push_back(static_cast<int>(i));
    else
      by_forward[model.unit_of(slots[i].name)].push_back(static_cast<int>(i));
  }
  s.unit_of_forward.assign(by_forward.size(), -1);
  auto add_unit = [&](const std::vector<int>& unit_slots, bool resident) {
    Impl::Unit u;
    u.slots = unit_slots;
    u.resident = resident;
    for (int slot : unit_slots) {
      u.offsets.push_back(u.numel);
      u.numel += slots[slot].numel;
    }
    u.padded = (u.numel + G - 1) / G * G;
    u.chunk = u.padded / G;
    u.shard_offset = s.shard_numel;
    s.shard_numel += u.chunk;
    s.units.push_back(std::move(u));
    return static_cast<int>(s.units.size()) - 1;
  };
  for (size_t f = 0; f < by_forward.size(); ++f) {
    if (by_forward[f].empty()) continue;
    s.unit_of_forward[f] = add_unit(by_forward[f], options.stage == 2);
    s.forward_order.push_back(s.unit_of_forward[f]);
  }
  const int persistent_unit = persistent.empty() ? -1 : add_unit(persistent, true);
  s.reduce_order.assign(s.forward_order.rbegin(), s.forward_order.rend());
  if (persistent_unit >= 0) s.reduce_order.push_back(persistent_unit);
  s.unit_of_slot.assign(slots.size(), -1);
  for (size_t index = 0; index < s.units.size(); ++index)
    for (int slot : s.units[index].slots) s.unit_of_slot[slot] = static_cast<int>(index);

  // ---- buffers: the parameters move into the unit buffers ----
  const at::TensorOptions float_options = named.front().second.options().dtype(at::kFloat);
  s.shard_params = at::zeros({s.shard_numel}, float_options);
  s.shard_grads = at::zeros({s.shard_numel}, float_options);
  {
    at::NoGradGuard no_grad;
    for (Impl::Unit& u : s.units) {
      u.params = at::zeros({u.padded}, float_options);
      for (size_t k = 0; k < u.slots.size(); ++k) {
        const ParamSlot& slot = slots[u.slots[k]];
        at::Tensor view = u.params.narrow(0, u.offsets[k], slot.numel).view(slot.shape);
        view.copy_(s.parameters[u.slots[k]].detach());
        s.parameters[u.slots[k]].set_data(view);
        s.parameters[u.slots[k]].mutable_grad() = at::Tensor();
      }
      if (s.frees(u)) s.add_transient(u.padded * 4);
    }
  }

  // ---- optimizer over the shard ----
  if (options.offload_optimizer && HostOptimizer::needed(s.shard_params, options.force_offload_copies))
    s.host = std::make_unique<HostOptimizer>(s.shard_params, adamw, options.force_offload_copies);
  else
    s.adamw = std::make_unique<AdamW>(s.shard_numel, adamw, s.shard_params.options());
  for (const Impl::Unit& u : s.units) {
    const int64_t mine_begin = s.group_rank * u.chunk, mine_end = mine_begin + u.chunk;
    for (size_t k = 0; k < u.slots.size(); ++k) {
      const ParamSlot& slot = slots[u.slots[k]];
      const int64_t begin = std::max(u.offsets[k], mine_begin);
      const int64_t end = std::min(u.offsets[k] + slot.numel, mine_end);
      if (!slot.decay || begin >= end) continue;
      const ElementRange range{u.shard_offset + begin - mine_begin, u.shard_offset + end - mine_begin};
      if (!s.shard_decay.empty() && s.shard_decay.back().end == range.begin)
        s.shard_decay.back().end = range.end;
      else
        s.shard_decay.push_back(range);
    }
  }

  s.hooks = std::make_unique<GradientReadyHooks>(
      s.parameters, [&s](size_t slot) { s.on_gradient(slot); }, "ShardedStrategy");
  model.set_unit_hooks(&s);
}

ShardedStrategy::~ShardedStrategy() {
  Impl& s = *impl_;
  s.model.set_unit_hooks(nullptr);
  // In-flight collectives write into our buffers: finish them first.
  for (auto& u : s.units) {
    if (u.gather_work) u.gather_work->wait();
    if (u.reduce_work) u.reduce_work->wait();
    if (u.inter_work) u.inter_work->wait();
  }
  // The model outlives us and holds gathered units' storage, which NCCL
  // recorded on our communicators' streams: move it into fresh memory while
  // those streams still exist (freeing the old block needs them).
  at::NoGradGuard no_grad;
  for (size_t index = 0; index < s.units.size(); ++index) {
    s.detach_grads(static_cast<int>(index));
    Impl::Unit& u = s.units[index];
    if (!u.gathered) continue;
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
  if (!s.unsettled) return;
  for (const Impl::Unit& u : s.units) s.comm.broadcast(u.params, root);
  s.settle();
}

void ShardedStrategy::zero_grad() {
  Impl& s = *impl_;
  s.settle();
  if (s.host) s.host->synchronize();  // a copy of the old gradients may still be reading them
  s.shard_grads.zero_();
  for (size_t index = 0; index < s.units.size(); ++index) s.detach_grads(static_cast<int>(index));
}

void ShardedStrategy::prepare_backward(bool sync) {
  Impl& s = *impl_;
  s.settle();
  // Reducing every micro-step: the previous micro-step's reductions finish first.
  if (s.round_open) s.finish_round();
  s.final_round = sync;
  s.sync = sync || s.options.reduce_every_micro_step;
  s.round_open = s.sync;
  s.next_reduce = 0;
  s.next_inter = 0;
  for (size_t index = 0; index < s.units.size(); ++index) {
    Impl::Unit& u = s.units[index];
    u.pending = static_cast<int>(u.slots.size());
    u.backward_done = false;
  }
  // The persistent unit has no forward of its own: its gradients are
  // accumulated by many units' backward.
  const int last = s.reduce_order.back();
  if (s.units[last].resident && std::find(s.forward_order.begin(), s.forward_order.end(), last) == s.forward_order.end())
    s.attach_grads(last);
}

void ShardedStrategy::finish_backward() {
  Impl& s = *impl_;
  s.sync = true;
  s.finish_round();
  if (s.inter) {
    s.launch_inters_before(s.reduce_order.size());
    for (int index : s.reduce_order)
      if (s.units[index].inter_work) s.complete_inter(index);
  }
  if (s.host) s.offload_rest();
  if (s.options.stage == 3)
    for (size_t index = 0; index < s.units.size(); ++index)
      if (s.frees(s.units[index])) s.free_unit(static_cast<int>(index));
}

double ShardedStrategy::step(double lr, double max_grad_norm) {
  Impl& s = *impl_;
  s.settle();
  // Unit padding is zero in every rank's gradient: it adds nothing to the
  // norm, and AdamW leaves the padded parameters at zero.
  const double norm = global_grad_norm(s.shard_grads, *s.reduce_comm);
  const double scale = max_grad_norm > 0 ? clip_coefficient(norm, max_grad_norm) : 1.0;
  if (s.host) {
    s.offload_rest();  // a step without a finished backward
    // The host master holds every chunk: the copies back fill the shard buffer.
    s.stage_shard(/*copy=*/false);
    s.host->step(s.shard_params, scale, s.shard_decay, lr);
  } else {
    scale_grads(s.shard_grads, scale);
    s.stage_shard(/*copy=*/true);
    s.adamw->step(s.shard_params, s.shard_grads, s.shard_decay, lr);
  }
  s.gather_resident();
  s.release_shard();
  return norm;
}

const ParamLayout& ShardedStrategy::layout() const { return *impl_->layout; }

at::Tensor ShardedStrategy::flat_params() const {
  Impl& s = *impl_;
  s.settle();
  at::Tensor flat = at::zeros({s.layout->padded_numel(s.comm.size())}, s.shard_params.options());
  for (size_t index = 0; index < s.units.size(); ++index) {
    Impl::Unit& u = s.units[index];
    const bool was_gathered = u.gathered;
    s.ensure_gathered(static_cast<int>(index));
    for (size_t k = 0; k < u.slots.size(); ++k) {
      const ParamSlot& slot = s.layout->slots()[u.slots[k]];
      flat.narrow(0, slot.offset, slot.numel).copy_(u.params.narrow(0, u.offsets[k], slot.numel));
    }
    if (!was_gathered) s.free_unit(static_cast<int>(index));
  }
  return flat;
}

at::Tensor ShardedStrategy::gather_grads() const {
  Impl& s = *impl_;
  at::Tensor flat = at::zeros({s.layout->numel()}, s.shard_grads.options());
  for (const Impl::Unit& u : s.units) {
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
  const int64_t window_begin = s.shard_numel * replica / replicas;
  const int64_t window_end = s.shard_numel * (replica + 1) / replicas;
  std::vector<FlatPart> parts;
  for (const Impl::Unit& u : s.units) {
    const int64_t mine_begin = s.group_rank * u.chunk, mine_end = mine_begin + u.chunk;
    for (size_t k = 0; k < u.slots.size(); ++k) {
      const ParamSlot& slot = s.layout->slots()[u.slots[k]];
      int64_t begin = std::max(u.offsets[k], mine_begin);
      int64_t end = std::min(u.offsets[k] + slot.numel, mine_end);
      // [begin, end) in unit coordinates -> shard coordinates, clipped to the window.
      int64_t shard_begin = u.shard_offset + begin - mine_begin;
      int64_t shard_end = u.shard_offset + end - mine_begin;
      const int64_t clip_front = std::max<int64_t>(0, window_begin - shard_begin);
      shard_begin += clip_front;
      begin += clip_front;
      shard_end = std::min(shard_end, window_end);
      if (shard_begin >= shard_end) continue;
      FlatPart part;
      part.begin = slot.offset + begin - u.offsets[k];
      // Stage 2: the chunk lives in the (gathered) unit buffer.
      part.params = s.transient_shard()
                        ? u.params.narrow(0, begin, shard_end - shard_begin)
                        : s.shard_params.narrow(0, shard_begin, shard_end - shard_begin);
      part.exp_avg = s.optimizer().exp_avg().narrow(0, shard_begin, shard_end - shard_begin);
      part.exp_avg_sq = s.optimizer().exp_avg_sq().narrow(0, shard_begin, shard_end - shard_begin);
      parts.push_back(part);
    }
  }
  if (parts.empty()) {
    FlatPart empty;
    empty.params = s.shard_params.narrow(0, 0, 0);
    empty.exp_avg = s.optimizer().exp_avg().narrow(0, 0, 0);
    empty.exp_avg_sq = s.optimizer().exp_avg_sq().narrow(0, 0, 0);
    parts.push_back(empty);
  }
  return parts;
}

int64_t ShardedStrategy::optimizer_step() const { return impl_->optimizer().step_count(); }

void ShardedStrategy::finish_load(int64_t optimizer_step) {
  Impl& s = *impl_;
  s.settle();
  at::Tensor exp_avg = s.optimizer().exp_avg().clone();
  at::Tensor exp_avg_sq = s.optimizer().exp_avg_sq().clone();
  // The checkpoint parts of resident units were read into the unit buffers.
  s.stage_shard(/*copy=*/true);
  if (s.inter) {
    // Each replica read its window of the shard; put the windows together.
    const int64_t replicas = s.inter->size();
    std::vector<int64_t> counts;
    for (int64_t k = 0; k < replicas; ++k)
      counts.push_back(s.shard_numel * (k + 1) / replicas - s.shard_numel * k / replicas);
    const int64_t begin = s.shard_numel * s.inter->rank() / replicas;
    auto gather = [&](at::Tensor& full) {
      at::Tensor mine = full.narrow(0, begin, counts[s.inter->rank()]).clone();
      s.inter->all_gather_v(mine, full, counts);
    };
    gather(s.shard_params);
    gather(exp_avg);
    gather(exp_avg_sq);
  }
  if (s.host) s.host->load_master(s.shard_params);
  s.optimizer().load_state(exp_avg, exp_avg_sq, optimizer_step);
  for (size_t index = 0; index < s.units.size(); ++index)
    if (!s.units[index].resident) s.free_unit(static_cast<int>(index));
  s.gather_resident();
  s.release_shard();
}

const StrategyStats& ShardedStrategy::stats() const {
  Impl& s = *impl_;
  s.stats.bytes_sent = s.comm.stats().bytes_sent - s.bytes_base + s.gather_comm->stats().bytes_sent +
                       s.reduce_comm->stats().bytes_sent + (s.inter ? s.inter->stats().bytes_sent : 0);
  return s.stats;
}

StrategyMemory ShardedStrategy::memory() const {
  const Impl& s = *impl_;
  StrategyMemory m;
  m.param_bytes = s.transient_shard() ? 0 : s.shard_numel * 4;
  m.grad_bytes = s.shard_numel * 4;
  for (const Impl::Unit& u : s.units) {
    if (u.resident) m.param_bytes += u.padded * 4;
    if (u.grads.defined()) m.grad_bytes += u.padded * 4;  // kept across no_sync micro-steps
  }
  m.optimizer_bytes = 2 * s.shard_numel * 4;
  if (s.host) s.host->count(m);
  m.peak_transient_bytes = s.peak_transient_bytes;
  return m;
}

int64_t ShardedStrategy::num_units() const { return static_cast<int64_t>(impl_->units.size()); }
int64_t ShardedStrategy::shard_numel() const { return impl_->shard_numel; }
at::Tensor ShardedStrategy::shard_grads() const { return impl_->shard_grads; }
const AdamW& ShardedStrategy::optimizer() const { return impl_->optimizer(); }

}  // namespace shardtrain
