// The per-rank memory estimate (train/memory_estimate.h; docs/DESIGN.md,
// "Memory estimate"): model states from the strategies' buffer rules, LoRA's
// frozen base from FrozenShards' (parallel/frozen_shards.h); the activations
// are memory_activations.cpp's.
#include "shardtrain/train/memory_estimate.h"

#include "shardtrain/tasks/task_rules.h"

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"
#include "shardtrain/core/log.h"
#include "shardtrain/model/lora.h"
#include "shardtrain/model/parameter_plan.h"
#include "shardtrain/parallel/make_strategy.h"
#include "shardtrain/parallel/shard_policy.h"
#include "shardtrain/parallel/topology.h"

namespace shardtrain {
namespace {

// ---- model states ----

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

struct Unit {
  int64_t numel = 0, padded = 0;
  int64_t forward_unit = 0;  // parameter_plan's unit; -1 for stage 3's persistent unit
};

const char* unit_name(const EncoderConfig& c, int64_t unit) {
  if (unit == 0) return "embeddings";
  if (unit < c.layer_unit(0)) return "relative embeddings";
  return unit < c.head_unit() ? "encoder layer" : "head";
}

int element_bytes(at::ScalarType t) { return t == at::kFloat ? 4 : 2; }

// The sharded strategies' units (parallel/sharded.h): one per forward unit,
// stage 3's small tensors in one persistent unit, each padded to the group.
std::vector<Unit> shard_units(const std::vector<ParameterSpec>& plan, int64_t num_units, int group,
                              int64_t persistence_threshold, int stage) {
  std::vector<Unit> units(static_cast<size_t>(num_units));
  for (size_t u = 0; u < units.size(); ++u) units[u].forward_unit = static_cast<int64_t>(u);
  Unit persistent;
  persistent.forward_unit = -1;
  for (const ParameterSpec& p : plan) {
    if (!p.trainable) continue;
    const int64_t n = p.numel();
    if (stage == 3 && n < persistence_threshold)
      persistent.numel += n;
    else
      units[static_cast<size_t>(p.unit)].numel += n;
  }
  std::vector<Unit> out;
  for (Unit& u : units)
    if (u.numel > 0) out.push_back(u);
  if (persistent.numel > 0) out.push_back(persistent);
  for (Unit& u : out) u.padded = round_up(u.numel, group);
  return out;
}

// The most gathered parameters + unsharded gradients alive at once in stage 3
// (forward: a unit and its prefetched successors; backward: a unit's
// parameters and gradients, its prefetched predecessors, the previous unit's
// gradients still reducing, and the persistent unit's gradients for the whole
// backward), in elements.
int64_t stage3_peak_elements(const std::vector<Unit>& units, const ShardOptions& o) {
  std::vector<int64_t> order;
  int64_t persistent = 0;
  for (const Unit& u : units) {
    if (u.forward_unit < 0)
      persistent = u.padded;
    else
      order.push_back(u.padded);
  }
  const int64_t n = static_cast<int64_t>(order.size());
  auto prefetched = [&](int64_t at, int64_t budget, int step) {
    int64_t elements = 0, bytes = 0;
    for (int64_t p = at + step; budget > 0 && elements < budget && p >= 0 && p < n; p += step) {
      elements += order[static_cast<size_t>(p)];
      bytes += order[static_cast<size_t>(p)];
    }
    return bytes;
  };
  int64_t peak = 0;
  for (int64_t p = 0; p < n; ++p) {
    const int64_t here = order[static_cast<size_t>(p)];
    const int64_t forward = here + prefetched(p, o.forward_prefetch_elements, +1);
    const int64_t still_reducing = o.overlap_comm && p + 1 < n ? order[static_cast<size_t>(p + 1)] : 0;
    const int64_t backward = 2 * here + prefetched(p, o.backward_prefetch_elements, -1) + still_reducing + persistent;
    peak = std::max({peak, forward, backward});
  }
  return peak;
}

// ---- LoRA ----

// The frozen base of a LoRA run (parallel/frozen_shards.h), in elements of
// the parameters' dtype: lora_frozen_names()'s parameters per forward unit.
// Replicated, every rank holds all of it. Sharded over a group of G, each
// unit's tensors are one buffer padded to a multiple of G, of which a rank
// keeps its chunk; a unit is gathered whole around its forward, and in
// backward the unit whose backward runs stays gathered with the one above it
// (only units whose output needs a gradient: from the first unit that trains
// something up; below it autograd never reaches).
void estimate_frozen(const EncoderConfig& model, const LoraSpec& lora, const std::vector<ParameterSpec>& trained,
                     const Topology& topology, double ep, MemoryEstimate& e) {
  const std::vector<std::string> names = lora_frozen_names(model, lora);
  const std::set<std::string> frozen(names.begin(), names.end());
  std::vector<int64_t> unit_numel(static_cast<size_t>(model.num_units()), 0);
  for (const ParameterSpec& p : parameter_plan(model))
    if (frozen.count(p.name)) unit_numel[static_cast<size_t>(p.unit)] += p.numel();
  int64_t first_trained_unit = model.num_units();
  for (const ParameterSpec& p : trained) first_trained_unit = std::min(first_trained_unit, p.unit);
  e.lora_r = lora.r;
  e.lora_target_modules = lora.target_modules;
  e.num_frozen_parameters = 0;
  for (int64_t n : unit_numel) e.num_frozen_parameters += n;
  e.frozen_sharded = topology.shards_frozen_base();
  if (!e.frozen_sharded) {
    e.frozen_bytes = static_cast<double>(e.num_frozen_parameters) * ep;
    return;
  }
  const int64_t G = topology.shard_group_size;
  int64_t chunks = 0, gathered = 0;
  for (size_t u = 0; u < unit_numel.size(); ++u) {
    if (unit_numel[u] == 0) continue;
    const int64_t padded = round_up(unit_numel[u], G);
    chunks += padded / G;
    gathered = std::max(gathered, padded);  // forward: one unit at a time
    const int64_t above = u + 1 < unit_numel.size() ? round_up(unit_numel[u + 1], G) : 0;
    if (static_cast<int64_t>(u) >= first_trained_unit) gathered = std::max(gathered, padded + above);
  }
  e.frozen_bytes = static_cast<double>(chunks) * ep;
  e.frozen_gathered_bytes = static_cast<double>(gathered) * ep;
}

void estimate_states(const RunConfig& run, const EncoderConfig& model, const LoraSpec* lora, int world_size,
                     MemoryEstimate& e) {
  const ParallelConfig& parallel = run.parallel;
  const Topology topology = Topology::assume(0, world_size, run.parallel.ranks_per_node > 0
                                                               ? static_cast<int>(run.parallel.ranks_per_node)
                                                               : world_size,
                                             parallel);
  const bool offload_asked = parallel.offload_optimizer == OffloadDevice::kCpu;
  if (topology.kind == StrategyKind::kDdp && offload_asked)
    throw Error("parallel.offload_optimizer = \"cpu\" needs a sharded strategy (zero1, zero2, zero3, fsdp, hybrid); "
                "ddp keeps the optimizer with the replicated model");
  const MixedPrecision precision = mixed_precision_for(run.train.mixed_precision, parallel);
  const double ep = element_bytes(precision.param_dtype), er = element_bytes(precision.reduce_dtype);
  const bool mixed = precision.param_dtype != at::kFloat;
  // A HostOptimizer exists only where there is something to copy: a GPU.
  e.offload = offload_asked && !e.device_is_cpu;
  e.shard_group = topology.shard_group_size;
  // What the strategy holds: every trainable parameter, or LoRA's trained ones.
  const std::vector<ParameterSpec> plan = lora ? lora_trainable_plan(model, *lora) : parameter_plan(model);
  if (lora) estimate_frozen(model, *lora, plan, topology, ep, e);
  e.num_parameters = count_trainable(plan);
  // The largest forward unit (what zero3 / fsdp gather at once).
  std::vector<int64_t> unit_numel(static_cast<size_t>(model.num_units()), 0);
  for (const ParameterSpec& p : plan)
    if (p.trainable) unit_numel[static_cast<size_t>(p.unit)] += p.numel();
  const auto largest = std::max_element(unit_numel.begin(), unit_numel.end());
  e.largest_unit_numel = *largest;
  e.largest_unit = unit_name(model, largest - unit_numel.begin());

  // The optimizer over a shard of `n` elements (parallel/shard_optimizer.h).
  auto optimizer = [&](double n) {
    e.optimizer_bytes = 8 * n + (mixed && !e.offload ? 4 * n : 0.0);
    if (e.offload) e.host_bytes = 16 * n;  // master, gradient copy, exp_avg, exp_avg_sq
  };
  const int64_t psi = e.num_parameters;
  switch (topology.kind) {
    case StrategyKind::kDdp:
    case StrategyKind::kZero1: {
      const int64_t padded = round_up(psi, world_size);
      e.param_bytes = static_cast<double>(padded) * ep;
      e.grad_bytes = static_cast<double>(padded) * ep;
      if (topology.kind == StrategyKind::kDdp) {
        optimizer(static_cast<double>(padded));
        break;
      }
      const double shard = static_cast<double>(padded / world_size);
      optimizer(shard);
      // Reduce-scatter outputs (every bucket's own part, at most the shard),
      // or the post-step gather's copy of the shard and its staging.
      const int64_t piece = parallel.zero.allgather_bucket_size > 0
                                ? std::min<int64_t>(parallel.zero.allgather_bucket_size, padded / world_size)
                                : 0;
      e.comm_bytes = shard * ep + static_cast<double>(piece) * world_size * ep;
      break;
    }
    default: {  // zero2, zero3, hybrid
      const ShardOptions o = shard_options_for(parallel, topology);
      const int group = topology.shard_group_size;
      const std::vector<Unit> units = shard_units(plan, model.num_units(), group, o.persistence_threshold, o.stage);
      int64_t shard = 0, resident = 0, largest_padded = 0;
      for (const Unit& u : units) {
        shard += u.padded / group;
        largest_padded = std::max(largest_padded, u.padded);
        if (o.stage == 2 || u.forward_unit < 0) resident += u.padded;
      }
      // Stage 2 keeps every unit whole and stages the shard only inside step().
      e.param_bytes = static_cast<double>((o.stage == 2 ? 0 : shard) + resident) * ep;
      e.grad_bytes = static_cast<double>(shard) * er;
      optimizer(static_cast<double>(shard));
      if (o.stage == 3) {
        e.gathered_bytes = static_cast<double>(stage3_peak_elements(units, o)) * ep;
      } else {
        // Stage 2: every unit's full gradients may be alive at once (a unit's
        // are dropped only when its reduce-scatter completes, which on MPI can
        // trail the backward), or the shard staged for the step.
        int64_t all_units = 0;
        for (const Unit& u : units) all_units += u.padded;
        e.gathered_bytes = std::max(static_cast<double>(all_units), static_cast<double>(shard)) * ep;
      }
      const double chunk = static_cast<double>(largest_padded / group);
      e.comm_bytes = chunk * er * (o.overlap_comm ? 2 : 1) +
                     (precision.reduce_dtype != precision.param_dtype ? static_cast<double>(largest_padded) * er : 0.0);
      break;
    }
  }
  if (e.offload) {
    // The device keeps its shard of the parameters and gradients; the rest is
    // on the host, where HostOptimizer also keeps a gradient copy and master.
    e.optimizer_bytes = 0;
  }
}

}  // namespace

// The run's adapter: the [lora] keys, or lora.adapter's adapter_config.json
// (its weights are not read: the estimate runs before the model exists).
std::optional<LoraSpec> run_lora_spec(const RunConfig& run, const EncoderConfig& model) {
  if (!run.lora.enabled()) return std::nullopt;
  if (run.lora.adapter.empty()) return resolve_lora(model, run.lora);
  return read_peft_adapter_config(run.lora.adapter, model);
}

MemoryEstimate estimate_memory(const RunConfig& run, const EncoderConfig& model_config, int world_size) {
  if (world_size < 1) throw Error("the world size must be >= 1, got " + std::to_string(world_size));
  EncoderConfig model = model_config;
  if (run.model.hidden_dropout_prob) model.hidden_dropout_prob = *run.model.hidden_dropout_prob;
  if (run.model.attention_probs_dropout_prob) model.attention_probs_dropout_prob = *run.model.attention_probs_dropout_prob;
  MemoryEstimate e;
  e.strategy = enum_name(run.parallel.strategy);
  e.precision = enum_name(run.train.mixed_precision);
  e.world_size = world_size;
  e.device_is_cpu = run.run.device == Device::kCpu;
  // Multiple choice: every row is a sequence per choice (a single column
  // holding the lists counts one; docs/tasks.md).
  const int64_t sequences_per_row = task_rules(run.model.task).sequences_per_row(run.data);
  e.batch_size = run.train.batch_size * sequences_per_row;
  e.seq_len = run.data.max_length;
  e.checkpointing = run.model.gradient_checkpointing;
  const std::optional<LoraSpec> lora = run_lora_spec(run, model);
  const LoraSpec* adapter = lora ? &*lora : nullptr;
  estimate_states(run, model, adapter, world_size, e);
  const int bytes = element_bytes(mixed_precision_for(run.train.mixed_precision, run.parallel).param_dtype);
  e.activations_plain =
      estimate_activations(model, e.batch_size, e.seq_len, bytes, false, e.device_is_cpu, run.model.unpadded, adapter);
  e.activations_checkpointed =
      estimate_activations(model, e.batch_size, e.seq_len, bytes, true, e.device_is_cpu, run.model.unpadded, adapter);
  e.activations = e.checkpointing ? e.activations_checkpointed : e.activations_plain;
  return e;
}

}  // namespace shardtrain
