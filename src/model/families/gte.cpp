// GTE (Alibaba's gte-multilingual / gte-*-v1.5; docs/DESIGN.md, "Model
// families"), in its two layouts: the hub's ("new", Alibaba-NLP/new-impl's
// modeling.py, names under "new.") and transformers' own ("gte",
// modeling_gte.py, names under "gte."). BERT's post-norm layer with rotary
// positions instead of absolute ones (NTK-scaled in the hub layout), a gated
// MLP, optional token types, and BERT's pooler and heads for every task.
//
//   layer i of   "new": encoder.layer.<i>.          "gte": layers.<i>.
//   attention    attention.qkv_proj (pack_qkv)       self_attn.q_proj, k_proj, v_proj
//                or q_proj, k_proj, v_proj; o_proj   self_attn.o_proj
//   norm         attn_ln                             post_attention_layernorm
//   MLP          mlp.up_gate_proj [2I, D] -> [up,    mlp.gate_proj, mlp.up_proj:
//                gate]: up * act(gate); down_proj    act(gate) * up; mlp.down_proj
//   norm         mlp_ln                              post_mlp_layernorm
#include <cmath>

#include "model/config_json.h"
#include "model/families/bert_style.h"
#include "shardtrain/core/text.h"

namespace shardtrain {
namespace gte_impl {

using namespace detail;
using json = nlohmann::json;

bool hub_layout(const EncoderConfig& c) { return c.model_type == "new"; }

// NewConfig (model_type "new") and GteConfig ("gte").
void defaults(EncoderConfig& c) {
  c.attention_probs_dropout_prob = 0.0;
  c.type_vocab_size = 1;
  if (hub_layout(c)) {
    c.vocab_size = 30528;
    c.max_position_embeddings = 2048;
  } else {
    c.vocab_size = 250048;
    c.max_position_embeddings = 8192;
    c.pad_token_id = 1;
    c.pack_qkv = false;  // transformers' layout has q_proj, k_proj, v_proj only
  }
}

std::vector<std::string> keys() {
  std::vector<std::string> k = bert_shape_keys();
  k.insert(k.end(), {"classifier_dropout", "rope_theta", "rope_scaling", "rope_parameters", "pack_qkv"});
  return k;
}

// The hub layout's rope_scaling {"type": "ntk", "factor": f} (new-impl's
// NTKScalingRotaryEmbedding; "mixed_b" is its other variant).
void read_ntk_scaling(const json& j, EncoderConfig& c, const std::string& source) {
  if (!j.contains("rope_scaling") || j["rope_scaling"].is_null()) return;
  const json& scaling = j["rope_scaling"];
  const std::string where = source + " rope_scaling";
  if (!scaling.is_object())
    config_key_error(source, "rope_scaling", "must be an object {\"type\": \"ntk\", \"factor\": ...}");
  const std::string type = read_string(scaling, "type", read_string(scaling, "rope_type", "", where), where);
  if (type != "ntk")
    config_key_error(source, "rope_scaling",
                     "type \"" + clip_for_message(type, 40) + "\" is not supported; GTE's is \"ntk\"");
  if (scaling.contains("mixed_b") && !scaling["mixed_b"].is_null())
    config_key_error(source, "rope_scaling", "mixed_b (mixed NTK scaling) is not supported");
  c.rope_scaling_type = "ntk";
  c.rope_scaling_factor = read_double(scaling, "factor", 1.0, where);
}

// transformers' GteConfig: rope_parameters {"rope_type": "default" | "linear",
// "rope_theta", "factor"}, or the hub's rope_theta / rope_scaling, which it
// converts (NTK with factor f: theta x f, linear factor f^(2 / head size)).
void read_rope_parameters(const json& j, EncoderConfig& c, const std::string& source) {
  if (!j.contains("rope_parameters") || j["rope_parameters"].is_null()) {
    read_ntk_scaling(j, c, source);
    if (c.rope_scaling_type == "ntk") {
      const double f = c.rope_scaling_factor;
      c.rope_theta *= f;
      c.rope_scaling_type = "linear";
      c.rope_scaling_factor = std::pow(f, 2.0 / static_cast<double>(c.head_dim()));
    }
    return;
  }
  const json& rope = j["rope_parameters"];
  const std::string where = source + " rope_parameters";
  if (!rope.is_object()) config_key_error(source, "rope_parameters", "must be an object");
  c.rope_theta = read_double(rope, "rope_theta", c.rope_theta, where);
  const std::string type = read_string(rope, "rope_type", "default", where);
  if (type == "linear") {
    c.rope_scaling_type = "linear";
    c.rope_scaling_factor = read_double(rope, "factor", 1.0, where);
  } else if (type != "default") {
    config_key_error(source, "rope_parameters",
                     "rope_type \"" + clip_for_message(type, 40) + "\" is not supported; GTE's are \"default\" and "
                     "\"linear\"");
  }
}

// Keys that change nothing here are kept as they are (extra_json): unpad_inputs
// and use_memory_efficient_attention (the same math unpadded or through
// xformers), logn_attention_clip1 (only with logn_attention_scale). What is
// not implemented is refused, naming the key.
void read(const json& j, EncoderConfig& c, const std::string& source) {
  read_bert_shape(j, c, source);
  c.classifier_dropout = read_double(j, "classifier_dropout", -1.0, source);
  c.rope_theta = read_double(j, "rope_theta", c.rope_theta, source);
  if (hub_layout(c)) {
    c.pack_qkv = read_bool(j, "pack_qkv", c.pack_qkv, source);
    read_ntk_scaling(j, c, source);
    // NewConfig has no pad_token_id default: without one the word embedding
    // has no padding row (padding_idx None).
    c.word_padding_row = j.contains("pad_token_id") && !j["pad_token_id"].is_null();
  } else {
    // new-impl's weights under transformers' model_type (a hub folder whose
    // config names "gte" but whose code is new-impl's) would fail at loading,
    // far from the cause.
    if (j.contains("pack_qkv") && !j["pack_qkv"].is_null())
      config_key_error(source, "pack_qkv",
                       "belongs to the hub layout (model_type \"new\", new-impl's modeling.py); transformers' "
                       "\"gte\" has separate q_proj, k_proj, v_proj");
    // transformers fills rope_parameters' missing entries from a legacy
    // rope_scaling (setdefault); both given is refused rather than merged.
    if (j.contains("rope_parameters") && !j["rope_parameters"].is_null() && j.contains("rope_scaling") &&
        !j["rope_scaling"].is_null())
      config_key_error(source, "rope_scaling",
                       "is given beside rope_parameters; keep one (rope_parameters: {\"rope_type\", \"rope_theta\", "
                       "\"factor\"})");
    if (c.num_attention_heads > 0) read_rope_parameters(j, c, source);
  }
  const std::string positions = read_string(j, "position_embedding_type", "rope", source);
  if (positions != "rope")
    config_key_error(source, "position_embedding_type",
                     "\"" + clip_for_message(positions, 40) + "\" is not supported; only \"rope\" is implemented");
  const std::string norm = read_string(j, "layer_norm_type", "layer_norm", source);
  if (norm != "layer_norm")
    config_key_error(source, "layer_norm_type",
                     "\"" + clip_for_message(norm, 40) + "\" is not supported; only \"layer_norm\" is implemented");
  if (read_bool(j, "logn_attention_scale", false, source))
    config_key_error(source, "logn_attention_scale",
                     "is true; scaling the queries by log(length) / log(max_position_embeddings) is not implemented");
}

void write(const EncoderConfig& c, json& j) {
  write_bert_shape(c, j);
  j["classifier_dropout"] = c.classifier_dropout >= 0 ? json(c.classifier_dropout) : json(nullptr);
  if (hub_layout(c)) {
    j["rope_theta"] = c.rope_theta;
    j["rope_scaling"] = c.rope_scaling_type.empty()
                            ? json(nullptr)
                            : json{{"type", c.rope_scaling_type}, {"factor", c.rope_scaling_factor}};
    j["pack_qkv"] = c.pack_qkv;
    if (!c.word_padding_row) j["pad_token_id"] = nullptr;
    return;
  }
  json rope = {{"rope_type", c.rope_scaling_type.empty() ? "default" : c.rope_scaling_type},
               {"rope_theta", c.rope_theta}};
  if (!c.rope_scaling_type.empty()) rope["factor"] = c.rope_scaling_factor;
  j["rope_parameters"] = rope;
}

void validate(const EncoderConfig& c, const std::string& source) {
  if (c.head_dim() % 2 != 0)
    config_key_error(source, "hidden_size",
                     "the head size hidden_size / num_attention_heads = " + std::to_string(c.head_dim()) +
                         " must be even for rotary position embeddings");
  if (!(c.rope_theta > 0)) config_key_error(source, "rope_theta", "must be > 0");
  const char* scaling_key = hub_layout(c) ? "rope_scaling" : "rope_parameters";
  const std::string own = hub_layout(c) ? "ntk" : "linear";
  if (!c.rope_scaling_type.empty() && c.rope_scaling_type != own)
    config_key_error(source, scaling_key, "type \"" + c.rope_scaling_type + "\" is not this layout's \"" + own + "\"");
  // new-impl scales only when factor x max_position_embeddings exceeds
  // max_position_embeddings; transformers' conversion always does: below 1 they differ.
  if (!c.rope_scaling_type.empty() && !(c.rope_scaling_factor >= 1.0))
    config_key_error(source, scaling_key, "factor must be >= 1");
}

// The rotary base and position divisor of the config's scaling (LayerSpec).
std::pair<double, double> rope_of(const EncoderConfig& c) {
  if (c.rope_scaling_type == "ntk") {
    const double f = c.rope_scaling_factor;
    return {c.rope_theta * f, std::pow(f, 2.0 / static_cast<double>(c.head_dim()))};
  }
  if (c.rope_scaling_type == "linear") return {c.rope_theta, c.rope_scaling_factor};
  return {c.rope_theta, 1.0};
}

// BERT's _init_weights (normal initializer_range, zero biases, the padding
// row zeroed). Layers in forward order; HF's module order differs (the
// layouts register the norms, and transformers' the MLP, before attention, and
// GteModel its pooler before the layers): loading and saving go by name.
void plan(const EncoderConfig& c, PlanBuilder& b) {
  const std::string base = c.base_prefix();
  const int64_t D = c.hidden_size, I = c.intermediate_size;
  const bool hub = hub_layout(c);
  b.weights(InitKind::kNormal, c.initializer_range);
  b.set_unit(0);
  b.embedding(base + "embeddings.word_embeddings.weight", c.vocab_size, D, Slot::kWordEmbeddings,
              c.word_padding_row ? c.pad_token_id : -1);
  if (c.has_token_types())
    b.embedding(base + "embeddings.token_type_embeddings.weight", c.type_vocab_size, D, Slot::kTokenTypeEmbeddings);
  b.norm(base + "embeddings.LayerNorm", D, Slot::kEmbeddingNormWeight);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    b.set_unit(i + 1);
    const std::string layer = base + (hub ? "encoder.layer." : "layers.") + std::to_string(i) + ".";
    const std::string attention = layer + (hub ? "attention." : "self_attn.");
    if (c.pack_qkv) {
      b.linear(attention + "qkv_proj", 3 * D, D, Slot::kQkvWeight);
    } else {
      b.linear(attention + "q_proj", D, D, Slot::kQueryWeight);
      b.linear(attention + "k_proj", D, D, Slot::kKeyWeight);
      b.linear(attention + "v_proj", D, D, Slot::kValueWeight);
    }
    b.linear(attention + "o_proj", D, D, Slot::kAttentionOutWeight);
    b.norm(layer + (hub ? "attn_ln" : "post_attention_layernorm"), D, Slot::kAttentionNormWeight);
    if (hub) {
      b.linear(layer + "mlp.up_gate_proj", 2 * I, D, Slot::kMlpInWeight, /*bias=*/false);
    } else {
      b.linear(layer + "mlp.gate_proj", I, D, Slot::kMlpGateWeight, /*bias=*/false);
      b.linear(layer + "mlp.up_proj", I, D, Slot::kMlpInWeight, /*bias=*/false);
    }
    b.linear(layer + "mlp.down_proj", D, I, Slot::kMlpOutWeight);
    b.norm(layer + (hub ? "mlp_ln" : "post_mlp_layernorm"), D, Slot::kMlpNormWeight);
  }
  // The pooler (add_pooling_layer) only in front of the sequence-level tasks.
  plan_bert_heads(c, b, base + "pooler.dense", "classifier", base + "pooler.dense");
}

// Words (+ token types), LayerNorm, dropout; positions are rotary, in attention.
EmbeddingRecipe embeddings(const EncoderConfig& c) {
  EmbeddingRecipe r = bert_embeddings(c);
  r.absolute_positions = false;
  return r;
}

// BERT's post-norm layer; the MLP's dropout inside (on the gated product) as
// well as after it, both hidden_dropout_prob.
LayerSpec layer(const EncoderConfig& c, int64_t i) {
  LayerSpec s = post_norm_layer(c, i);
  s.gated_mlp = true;
  s.gate_second_half = hub_layout(c);
  s.mlp_inner_dropout = c.hidden_dropout_prob;
  const std::pair<double, double> rope = rope_of(c);
  s.rope_theta = rope.first;
  s.rope_linear_factor = rope.second;
  return s;
}

}  // namespace gte_impl

const FamilySpec& gte_family() {
  using namespace gte_impl;
  static const FamilySpec spec{
      ModelFamily::kGte,
      "gte",
      // PEFT has no default LoRA targets for either.
      {{"new", "New", {}, "new."}, {"gte", "Gte", {}, "gte."}},
      "new.",
      {"embeddings.", "encoder.", "layers.", "pooler."},
      // GtePreTrainedModel._keys_to_ignore_on_load_unexpected: the rotary buffers.
      {"inv_freq"},
      TokenTypes::kOptional,
      /*separate_embedding_width=*/false,
      /*local_attention_layers=*/false,
      {},
      keys(),
      defaults,
      read,
      write,
      validate,
      plan,
      embeddings,
      layer,
      bert_pooler_head,  // both sequence-level tasks, as BERT
      bert_token_head};
  return spec;
}

}  // namespace shardtrain
