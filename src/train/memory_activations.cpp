// The activations part of the memory estimate (train/memory_estimate.h;
// docs/DESIGN.md, "Memory estimate"): what autograd keeps for backward, from
// the layer shapes and the layer code. Shapes: B batch, L sequence, T = B L
// tokens, D hidden, E embedding width (ELECTRA), I intermediate, H heads, r
// LoRA's rank.
#include <algorithm>
#include <cmath>
#include <set>
#include <utility>
#include <vector>

#include "shardtrain/model/family_spec.h"
#include "shardtrain/model/lora.h"
#include "shardtrain/model/parameter_plan.h"
#include "shardtrain/tasks/task_rules.h"
#include "shardtrain/train/memory_estimate.h"

namespace shardtrain {
namespace {

// The family's recipes (model/family_spec.h) say what each part computes:
// the layer's dropouts and norms, the embeddings' dropout and projection, the
// heads; the model runs the same recipes.

// What is trained, as far as activations care. Autograd saves a matmul's
// input only for its weight's gradient and its weight only for the input's,
// and records nothing where no input needs a gradient. In full fine-tuning
// every Linear keeps its input. Under LoRA (model/lora.h) a Linear keeps its
// input only when it is a target (its lora_A reads the input) or trained in
// full (a module to save); each target adds its r-wide down-projection
// [T, r] (lora_B's input), and with LoRA dropout its dropout mask and dropped
// copy of the input (an upper bound: the input itself is then counted too
// where it is kept); a part whose inputs and weights are all frozen keeps
// nothing (the frozen embeddings; layer 0's attention when the embeddings are
// frozen and none of q, k, v is a target). Measured against this at D 64
// (tests/test_memory_estimate.cpp): BERT with query / value adapters keeps a
// quarter less than in full fine-tuning, all-linear about the same.
struct TrainedLinears {
  bool lora = false;
  std::set<std::pair<int64_t, Slot>> keep_input;  // (unit, weight slot) of the Linears that keep their input
  std::vector<double> adapter_elements_per_token;  // per unit: r per target (+ 2 in per target with dropout)
  std::vector<bool> unit_trains;                   // per unit: has a trained parameter (LoRA target or saved)

  bool keeps(int64_t unit, Slot weight) const { return !lora || keep_input.count({unit, weight}) > 0; }
  bool trains(int64_t unit) const { return !lora || unit_trains[static_cast<size_t>(unit)]; }
  double adapter_bytes(int64_t unit, double T, double e) const {
    return lora ? adapter_elements_per_token[static_cast<size_t>(unit)] * T * e : 0.0;
  }
};

TrainedLinears trained_linears(const EncoderConfig& c, const LoraSpec* lora) {
  TrainedLinears t;
  if (!lora) return t;
  t.lora = true;
  const size_t units = static_cast<size_t>(c.num_units());
  t.adapter_elements_per_token.assign(units, 0.0);
  t.unit_trains.assign(units, false);
  for (const LinearModule& m : lora->targets) {
    t.keep_input.insert({m.unit, m.weight_slot});
    t.adapter_elements_per_token[static_cast<size_t>(m.unit)] +=
        static_cast<double>(lora->r) + (lora->dropout > 0 ? 2.0 * static_cast<double>(m.in_features) : 0.0);
  }
  for (const ParameterSpec& p : lora_trainable_plan(c, *lora)) {
    t.unit_trains[static_cast<size_t>(p.unit)] = true;
    if (p.lora == LoraPart::kNone) t.keep_input.insert({p.unit, p.slot});
  }
  return t;
}

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
//       gated (GTE): the [T, 2I] projection (or gate and up), the
//       activated half, the product (+ its dropout mask)       4 T I e (+ T I e)
//     dropout mask after the MLP [p > 0]                      T D e
//     LayerNorm input                                         T D 4
//     the concatenated QKV weight and bias (3 parameters;     (3 D^2 + 3 D) e
//       none for a fused qkv_proj)
//   pre-norm with a gated MLP (ModernBERT: Wi [2I, D])
//     LayerNorm input + output, twice (layer 0 has no attn_norm)
//     q, k, v; probabilities (+ mask); context; output mask [p > 0]
//     Wi's output [T, 2I] (input and gate share it), act(input), the product 4 T I e (+ T I e mask)
// A dropout multiplies by a mask that needs no gradient, so autograd keeps
// only the mask (x * mask saves mask). The layer's output is the next layer's
// input and is counted there. Under LoRA (TrainedLinears above) a Linear's
// input is counted only where it is kept, a part only where something in it
// needs a gradient (`grad`: the layer's input does; on return, its output),
// and the layer's adapters add theirs.
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
                              const LocalAttention& local, const TrainedLinears& trained, bool fused_qkv, bool& grad) {
  const double D = static_cast<double>(c.hidden_size), I = static_cast<double>(c.intermediate_size),
               H = static_cast<double>(c.num_attention_heads), T = B * L;
  const LayerSpec spec = LayerSpec::of(c, layer);
  const double TD = T * D;
  const int64_t unit = c.layer_unit(layer);
  auto keeps = [&](Slot weight) { return trained.keeps(unit, weight); };
  const bool local_layer = local.any && !c.is_global_layer(layer);
  const double qkv = local_layer && local.banded
                         ? (local.blocks * local.block * D + 2 * local.blocks * local.width * D) * e
                         : 3 * TD * e;
  const double scores = local_layer ? local.scores(H) : B * H * L * L;
  const bool blocked = cpu && scores > static_cast<double>(kAttentionBlockScores);
  const double probs = blocked ? 0.0 : scores * (4.0 + (spec.attention_probs_dropout > 0 ? e : 0.0));
  // Which parts need a gradient: the attention once q, k, v do, the rest once
  // the layer's input or an earlier part does (residual adds carry it on).
  const bool qkv_keeps = keeps(Slot::kQueryWeight) || keeps(Slot::kKeyWeight) || keeps(Slot::kValueWeight) ||
                         keeps(Slot::kQkvWeight);
  const bool attention_grad = grad || qkv_keeps;
  const bool out_grad = attention_grad || keeps(Slot::kAttentionOutWeight);
  const double attention_core = (attention_grad ? qkv + probs : 0.0) + (keeps(Slot::kAttentionOutWeight) ? TD * e : 0.0) +
                                (spec.attention_out_dropout > 0 && out_grad ? TD * e : 0.0);
  const double adapters = trained.adapter_bytes(unit, T, e);
  const bool mlp_norm_grad = grad || out_grad;
  const bool mlp_in_grad = mlp_norm_grad || keeps(Slot::kMlpInWeight);
  const double mlp_input = keeps(Slot::kMlpInWeight) ? TD * e : 0.0;  // the MLP norm's output
  // RMSNorm (EuroBERT) keeps its normalised input for the weight's gradient
  // besides LayerNorm's fp32 input: T D e more per norm.
  const double rms = spec.norm == NormKind::kRmsNorm ? TD * e : 0.0;
  if (spec.pre_norm) {
    // Layer 0 of ModernBERT has no attn_norm: Wqkv keeps the layer's input itself.
    const bool has_attn_norm = layer > 0 || spec.norm == NormKind::kRmsNorm;
    const double attn_norm = (!has_attn_norm || !grad ? 0.0 : TD * 4 + rms) + (qkv_keeps ? TD * e : 0.0);
    const double norms = attn_norm + (mlp_norm_grad ? TD * 4 + rms : 0.0) + mlp_input;
    // Wi's output (input and gate share it; EuroBERT: gate_proj's and
    // up_proj's) and act(input); the product is Wo's input.
    const double mlp = (mlp_in_grad ? 3 * T * I * e + (spec.mlp_inner_dropout > 0 ? T * I * e : 0.0) : 0.0) +
                       (keeps(Slot::kMlpOutWeight) ? T * I * e : 0.0);
    grad = mlp_in_grad || keeps(Slot::kMlpOutWeight);
    return norms + attention_core + mlp + adapters;
  }
  const double qkv_weight = grad && !fused_qkv ? (3 * D * D + 3 * D) * e : 0.0;
  double position_terms = 0;
  if (c.has_relative_unit()) {
    const double R = relative_rows(c, L);
    const bool position_keeps = keeps(Slot::kPositionKeyWeight) || keeps(Slot::kPositionQueryWeight) || qkv_keeps;
    position_terms = (attention_grad ? 2 * R * D * e : 0.0) +
                     (spec.position_dropout > 0 && position_keeps ? 2 * R * D * e : 0.0);
  }
  const bool mlp_out_grad = mlp_in_grad || keeps(Slot::kMlpOutWeight);
  const double mlp_inner =
      spec.gated_mlp ? 3 * T * I * e + (spec.mlp_inner_dropout > 0 ? T * I * e : 0.0) : T * I * e;
  const double mlp = (mlp_in_grad ? mlp_inner : 0.0) + (keeps(Slot::kMlpOutWeight) ? T * I * e : 0.0) +
                     (spec.mlp_out_dropout > 0 && mlp_out_grad ? TD * e : 0.0);
  grad = mlp_norm_grad || mlp_out_grad;
  return position_terms + (qkv_keeps ? TD * e : 0.0) + attention_core + (mlp_norm_grad ? TD * 4 : 0.0) + mlp_input +
         mlp + (grad ? TD * 4 : 0.0) + qkv_weight + adapters;
}

// What DeBERTa's layers share (relative attention): the relative embeddings
// unit's output [2 span, D] (and in 16-bit the fp32 copy its LayerNorm
// saves, where that unit trains), and the relative positions' index and its
// transpose, [L, L] int64 each.
double relative_shared_bytes(const EncoderConfig& c, double L, double e, const TrainedLinears& trained) {
  if (!c.has_relative_unit()) return 0.0;
  const double table = 2 * static_cast<double>(c.relative_span()) * static_cast<double>(c.hidden_size);
  const bool norm_copy = e != 4 && c.norm_relative_embeddings() && trained.trains(c.layer_unit(0) - 1);
  return table * e + (norm_copy ? table * 4 : 0.0) + 2 * L * L * 8;
}

// The embeddings: the LayerNorm input (fp32), its dropout mask, and ELECTRA's
// projection input (E wide); the output is layer 0's input. Frozen (LoRA,
// nothing of them trained): nothing.
double embedding_activation_bytes(const EncoderConfig& c, double B, double L, double e, const TrainedLinears& trained) {
  if (!trained.trains(0)) return 0.0;
  const double T = B * L, E = static_cast<double>(c.embedding_width());
  const EmbeddingRecipe recipe = family_spec(c.family).embeddings(c);
  double bytes = (recipe.norm ? T * E * 4 : 0.0) + (recipe.dropout > 0 ? T * E * e : 0.0);
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
// the logits with what the loss keeps of them. Under LoRA a frozen head
// dense (BERT's pooler, ModernBERT's head.dense) keeps no input.
double head_activation_bytes(const EncoderConfig& c, double B, double L, double e, bool unpadded,
                             const TrainedLinears& trained) {
  const double TD = B * L * static_cast<double>(c.hidden_size), BD = B * static_cast<double>(c.hidden_size);
  const FamilySpec& family = family_spec(c.family);
  const bool dense_keeps = trained.keeps(c.head_unit(), Slot::kHeadDenseWeight);
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
    if (head.final_norm) bytes += TD * 4 + (head.final_norm_kind == NormKind::kRmsNorm ? TD * e : 0.0);
    if (head.prediction_head) bytes += (dense_keeps ? 2 : 1) * TD * e + TD * 4;
    return bytes;
  }
  const PooledHeadRecipe head = family.pooled_head(c);
  double last_output = 0.0;
  if (head.late_pooling)  // EuroBERT: the final norm (RMS) on every token, dense and GELU inputs, the classifier's
    last_output = TD * 4 + TD * e + (dense_keeps ? TD * e : 0.0) + 2 * TD * e;
  else if (head.mean_pooling)
    last_output = TD * 4 + (unpadded ? TD * e : 0.0);
  else if (!unpadded)
    last_output = head.final_norm ? (e != 4 ? 0.0 : TD * e) : (dense_keeps ? TD * e : 0.0);
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

}  // namespace

ActivationEstimate estimate_activations(const EncoderConfig& model, int64_t batch_size, int64_t seq_len,
                                        int element_bytes, bool checkpointing, bool device_is_cpu, bool unpadded,
                                        const LoraSpec* lora) {
  const double B = static_cast<double>(batch_size), L = static_cast<double>(seq_len), e = element_bytes;
  const TrainedLinears trained = trained_linears(model, lora);
  ActivationEstimate a;
  a.embeddings_bytes = embedding_activation_bytes(model, B, L, e, trained);
  a.head_bytes = head_activation_bytes(model, B, L, e, unpadded, trained);
  const LocalAttention local = local_attention(model, B, seq_len, unpadded);
  double all_layers = 0;
  bool grad = trained.trains(0);  // layer 0's input needs a gradient: the embeddings train
  const std::vector<ParameterSpec> plan = parameter_plan(model);
  const bool fused_qkv =
      std::any_of(plan.begin(), plan.end(), [](const ParameterSpec& p) { return p.slot == Slot::kQkvWeight; });
  for (int64_t i = 0; i < model.num_hidden_layers; ++i) {
    const double layer = layer_activation_bytes(model, i, B, L, e, device_is_cpu, local, trained, fused_qkv, grad);
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
  a.layers_bytes += relative_shared_bytes(model, L, e, trained);
  a.kept_bytes = a.embeddings_bytes + a.layers_bytes + a.head_bytes;
  // Backward: the gradients flowing between layers and a layer's temporaries
  // (about 4 T D, bench_activation_memory's peak over the kept figure), and a
  // checkpointed layer's recomputed activations.
  a.peak_bytes = a.kept_bytes + 4 * TD * 4 + (checkpointing ? a.layer_bytes : 0.0);
  return a;
}

}  // namespace shardtrain
