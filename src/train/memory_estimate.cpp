// The per-rank memory estimate (train/memory_estimate.h; docs/DESIGN.md,
// "Memory estimate"): model states from the strategies' buffer rules,
// activations from the layer shapes. Shapes: B batch, L sequence, T = B L
// tokens, D hidden, E embedding width (ELECTRA), I intermediate, H heads.
#include "shardtrain/train/memory_estimate.h"

#include "shardtrain/tasks/task_rules.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/model/family_spec.h"
#include "shardtrain/model/parameter_plan.h"
#include "shardtrain/parallel/make_strategy.h"
#include "shardtrain/parallel/shard_policy.h"
#include "shardtrain/parallel/topology.h"

namespace shardtrain {
namespace {

// ---- activations ----

// The family's recipes (model/family_spec.h) say what each part computes:
// the layer's dropouts and norms, the embeddings' dropout and projection, the
// heads; the model runs the same recipes.

// ModernBERT's local attention at full-length rows of L tokens: in blocks
// over the packed batch (`banded`), or over the whole L x L scores with a
// window mask.
struct LocalAttention {
  bool any = false;     // the model has local layers
  bool banded = false;  // they run in blocks
  double blocks = 0, block = 0, width = 0;
  double B = 0, L = 0;

  // Score elements of one local layer with H heads.
  double scores(double H) const { return banded ? blocks * H * block * width : B * H * L * L; }
  // The window mask the local layers share ([nb, 1, Bq, W] or [B, 1, L, L]).
  double mask_bytes(double e) const { return banded ? blocks * block * width * e : B * L * L * e; }
};

LocalAttention local_attention(const EncoderConfig& c, double B, int64_t L, bool unpadded) {
  LocalAttention a;
  a.B = B;
  a.L = static_cast<double>(L);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) a.any = a.any || !c.is_global_layer(i);
  const int64_t half_window = c.local_attention / 2;
  a.banded = a.any && unpadded && banded_attention_pays(L, half_window);
  if (a.banded) {
    const int64_t block = banded_attention_block(half_window);
    a.block = static_cast<double>(block);
    a.width = static_cast<double>(block + 2 * half_window);
    a.blocks = std::ceil(B * a.L / a.block);
  }
  return a;
}

// DeBERTa: the relative-embedding rows a row of L tokens reaches.
double relative_rows(const EncoderConfig& c, double L) {
  return std::min(2 * L - 1, 2 * static_cast<double>(c.relative_span()));
}

// What autograd keeps of one encoder layer, in bytes (e = the parameters'
// element size; LayerNorm saves an fp32 copy of its input in mixed precision,
// and the attention kernel saves fp32 probabilities):
//   post-norm (BERT, RoBERTa, ELECTRA, DistilBERT)
//     layer input (saved by the QKV projection)              T D e
//     q, k, v reshaped for the attention kernel               3 T D e
//     softmax probabilities, and their dropout mask           B H L^2 (4 + e [p > 0])
//       (none on a CPU above kAttentionBlockScores: the blocked kernel
//       keeps q, k, v and recomputes them in backward)
//     context (input of the output projection)                T D e
//     dropout mask after the output projection [p > 0]        T D e
//     LayerNorm input; its output (the MLP's input)           T D 4 + T D e
//     MLP: activation input, activation output                2 T I e
//     dropout mask after the MLP [p > 0]                      T D e
//     LayerNorm input                                         T D 4
//     the concatenated QKV weight and bias (3 parameters)     (3 D^2 + 3 D) e
//   pre-norm with a gated MLP (ModernBERT: Wi [2I, D])
//     LayerNorm input + output, twice (layer 0 has no attn_norm)
//     q, k, v; probabilities (+ mask); context; output mask [p > 0]
//     Wi's output [T, 2I] (input and gate share it), act(input), the product 4 T I e (+ T I e mask)
// A dropout multiplies by a mask that needs no gradient, so autograd keeps
// only the mask (x * mask saves mask). The layer's output is the next layer's
// input and is counted there.
//   DeBERTa-v2 with relative attention, besides (docs/DESIGN.md, "DeBERTa-v2";
//   R = the relative-embedding rows a row of L tokens reaches, at most
//   min(2 L - 1, 2 span))
//     the position projections, kept by the attention kernel   2 R D e
//     pos_dropout's mask and the dropped rows [p > 0]          2 R D e
//   a local layer of a packed batch in blocks (banded_attention_pays; nb
//   blocks of Bq queries against W = Bq + 2 half_window keys, nb Bq >= T)
//     q, and each block's keys and values                     (nb Bq D + 2 nb W D) e
//     probabilities, and their dropout mask                   nb H Bq W (4 + e [p > 0])
//       in place of q, k, v and the B H L^2 probabilities above
double layer_activation_bytes(const EncoderConfig& c, int64_t layer, double B, double L, double e, bool cpu,
                              const LocalAttention& local) {
  const double D = static_cast<double>(c.hidden_size), I = static_cast<double>(c.intermediate_size),
               H = static_cast<double>(c.num_attention_heads), T = B * L;
  const LayerSpec spec = LayerSpec::of(c, layer);
  const double TD = T * D;
  const bool local_layer = local.any && !c.is_global_layer(layer);
  const double qkv = local_layer && local.banded
                         ? (local.blocks * local.block * D + 2 * local.blocks * local.width * D) * e
                         : 3 * TD * e;
  const double scores = local_layer ? local.scores(H) : B * H * L * L;
  const bool blocked = cpu && scores > static_cast<double>(kAttentionBlockScores);
  const double probs = blocked ? 0.0 : scores * (4.0 + (spec.attention_probs_dropout > 0 ? e : 0.0));
  const double attention_core = qkv + probs + TD * e + (spec.attention_out_dropout > 0 ? TD * e : 0.0);
  if (spec.pre_norm) {
    // Layer 0 has no attn_norm: Wqkv keeps the layer's input itself.
    const double norms = (layer == 0 ? TD * e : TD * 4 + TD * e) + TD * 4 + TD * e;
    const double mlp = 4 * T * I * e + (spec.mlp_inner_dropout > 0 ? T * I * e : 0.0);
    return norms + attention_core + mlp;
  }
  const double qkv_weight = (3 * D * D + 3 * D) * e;
  double position_terms = 0;
  if (c.has_relative_unit()) {
    const double R = relative_rows(c, L);
    position_terms = 2 * R * D * e + (spec.position_dropout > 0 ? 2 * R * D * e : 0.0);
  }
  return position_terms + TD * e + attention_core + (TD * 4 + TD * e) + 2 * T * I * e + (spec.mlp_out_dropout > 0 ? TD * e : 0.0) + TD * 4 +
         qkv_weight;
}

// What DeBERTa's layers share (relative attention): the relative embeddings
// unit's output [2 span, D] (and in 16-bit the fp32 copy its LayerNorm
// saves), and the relative positions' index and its transpose, [L, L] int64 each.
double relative_shared_bytes(const EncoderConfig& c, double L, double e) {
  if (!c.has_relative_unit()) return 0.0;
  const double table = 2 * static_cast<double>(c.relative_span()) * static_cast<double>(c.hidden_size);
  return table * e + (e != 4 && c.norm_relative_embeddings() ? table * 4 : 0.0) + 2 * L * L * 8;
}

// The embeddings: the LayerNorm input (fp32), its dropout mask, and ELECTRA's
// projection input (E wide); the output is layer 0's input.
double embedding_activation_bytes(const EncoderConfig& c, double B, double L, double e) {
  const double T = B * L, E = static_cast<double>(c.embedding_width());
  const EmbeddingRecipe recipe = family_spec(c.family).embeddings(c);
  double bytes = T * E * 4 + (recipe.dropout > 0 ? T * E * e : 0.0);
  if (recipe.projection) bytes += T * E * e;
  return bytes;
}

// What the head keeps of the last layer's output [T, D]:
//   first-token pooling, padded rows: the first token is a view, which keeps
//     the whole output alive where the head saves it as it is (the pooler's
//     Linear; ModernBERT's final_norm in fp32: in 16-bit that norm saves an
//     fp32 copy of the [B, D] rows and nothing of the output);
//   first-token pooling, packed rows: an index_select copy, nothing;
//   mean pooling (ModernBERT): final_norm over every token keeps its fp32
//     input; padded, the masked mean keeps only the mask (x * mask saves the
//     mask); packed, the per-sequence sum (index_add) keeps its source, the
//     normed output.
// Beside it, the pooled rows and the head's own tensors are [B, D].
// Token classification and question answering run the head on every token:
// the dropout's mask and output (the classifier's input; the last layer's
// output itself is not kept), ModernBERT's final_norm and prediction head in
// front of it (the norms' fp32 inputs, the dense and activation inputs), and
// the logits with what the loss keeps of them.
double head_activation_bytes(const EncoderConfig& c, double B, double L, double e, bool unpadded) {
  const double TD = B * L * static_cast<double>(c.hidden_size), BD = B * static_cast<double>(c.hidden_size);
  const FamilySpec& family = family_spec(c.family);
  if (task_rules(c.task).head_on_tokens()) {
    // Measured (tests/test_memory_estimate.cpp): about 16 bytes per logit and
    // 40 per token (logits, their fp32 log-softmax and loss terms, the
    // labels' mask); packed rows add the [B, L, C] scatter of the [T, C]
    // logits and its index.
    const double C = static_cast<double>(c.head_outputs()), T = B * L;
    const double outputs = T * (C * 16 + 40) + (unpadded ? T * (C * 4 + 24) : 0.0);
    // The head's dropout and prediction head, by the head's own recipe.
    const TokenHeadRecipe head = family.token_head(c);
    double bytes = TD * e + (head.dropout > 0 ? TD : 0.0) + outputs;
    if (head.prediction_head) bytes += TD * 4 + 2 * TD * e + TD * 4;
    return bytes;
  }
  const PooledHeadRecipe head = family.pooled_head(c);
  double last_output = 0.0;
  if (head.mean_pooling)
    last_output = TD * 4 + (unpadded ? TD * e : 0.0);
  else if (!unpadded)
    last_output = head.final_norm && e != 4 ? 0.0 : TD * e;
  return last_output + 6 * BD * e + B * static_cast<double>(c.num_labels) * 8;
}

// RoPE's cos and sin tables (ModernBERT). Padded rows: [L, Dh] per layer, too
// small to count. Packed rows: [T, Dh] fp32, one pair per rope theta, shared
// by the layers: kept by every checkpointed layer's context, and by the
// rotations themselves in fp32 (x * cos saves cos); in 16-bit each layer keeps
// its own cast pair instead.
double rotary_table_bytes(const EncoderConfig& c, double T, double e, bool checkpointing, bool unpadded) {
  if (!unpadded) return 0.0;
  std::set<double> distinct;  // one table pair per rope theta
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const double theta = LayerSpec::of(c, i).rope_theta;
    if (theta > 0) distinct.insert(theta);
  }
  if (distinct.empty()) return 0.0;
  const double thetas = static_cast<double>(distinct.size());
  const double pair = 2 * T * static_cast<double>(c.head_dim());
  if (checkpointing || e == 4) return thetas * pair * 4;
  return static_cast<double>(c.num_hidden_layers) * pair * e;
}

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

void estimate_states(const RunConfig& run, const EncoderConfig& model, int world_size, MemoryEstimate& e) {
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
  const std::vector<ParameterSpec> plan = parameter_plan(model);
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

ActivationEstimate estimate_activations(const EncoderConfig& model, int64_t batch_size, int64_t seq_len,
                                        int element_bytes, bool checkpointing, bool device_is_cpu, bool unpadded) {
  const double B = static_cast<double>(batch_size), L = static_cast<double>(seq_len), e = element_bytes;
  ActivationEstimate a;
  a.embeddings_bytes = embedding_activation_bytes(model, B, L, e);
  a.head_bytes = head_activation_bytes(model, B, L, e, unpadded);
  const LocalAttention local = local_attention(model, B, seq_len, unpadded);
  double all_layers = 0;
  for (int64_t i = 0; i < model.num_hidden_layers; ++i) {
    const double layer = layer_activation_bytes(model, i, B, L, e, device_is_cpu, local);
    a.layer_bytes = std::max(a.layer_bytes, layer);
    all_layers += layer;
  }
  const double TD = B * L * static_cast<double>(model.hidden_size);
  // Checkpointed, each layer keeps only its input (docs/DESIGN.md, "Activation checkpointing").
  a.layers_bytes = checkpointing ? static_cast<double>(model.num_hidden_layers) * TD * e : all_layers;
  // The window mask the local layers share: kept until backward as an input
  // of every checkpointed local layer, or by the blocked CPU kernel (it
  // recomputes the scores in backward).
  const bool local_blocked =
      device_is_cpu && local.scores(static_cast<double>(model.num_attention_heads)) > static_cast<double>(kAttentionBlockScores);
  if (local.any && (checkpointing || local_blocked)) a.layers_bytes += local.mask_bytes(e);
  a.layers_bytes += rotary_table_bytes(model, B * L, e, checkpointing, unpadded);
  a.layers_bytes += relative_shared_bytes(model, L, e);
  a.kept_bytes = a.embeddings_bytes + a.layers_bytes + a.head_bytes;
  // Backward: the gradients flowing between layers and a layer's temporaries
  // (about 4 T D, bench_activation_memory's peak over the kept figure), and a
  // checkpointed layer's recomputed activations.
  a.peak_bytes = a.kept_bytes + 4 * TD * 4 + (checkpointing ? a.layer_bytes : 0.0);
  return a;
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
  estimate_states(run, model, world_size, e);
  const int bytes = element_bytes(mixed_precision_for(run.train.mixed_precision, run.parallel).param_dtype);
  e.activations_plain =
      estimate_activations(model, e.batch_size, e.seq_len, bytes, false, e.device_is_cpu, run.model.unpadded);
  e.activations_checkpointed =
      estimate_activations(model, e.batch_size, e.seq_len, bytes, true, e.device_is_cpu, run.model.unpadded);
  e.activations = e.checkpointing ? e.activations_checkpointed : e.activations_plain;
  return e;
}

}  // namespace shardtrain
