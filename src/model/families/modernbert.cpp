// ModernBERT (modeling_modernbert.py, ModernBertConfig; docs/DESIGN.md,
// "Model families"): pre-norm layers with a fused QKV and a gated MLP, rotary
// positions, global attention every global_attn_every_n_layers and a sliding
// window in between, and one prediction head in front of every task's
// classifier.
#include <cmath>

#include "model/config_json.h"
#include "model/families/plan_builder.h"
#include "shardtrain/core/text.h"
#include "shardtrain/model/family_spec.h"

namespace shardtrain {
namespace modernbert_impl {

using namespace detail;
using json = nlohmann::json;

void defaults(EncoderConfig& c) {
  c.vocab_size = 50368;
  c.intermediate_size = 1152;
  c.num_hidden_layers = 22;
  c.max_position_embeddings = 8192;
  c.type_vocab_size = 0;
  c.layer_norm_eps = 1e-5;
  c.pad_token_id = 50283;
  c.hidden_dropout_prob = 0.0;           // mlp_dropout
  c.attention_probs_dropout_prob = 0.0;  // attention_dropout
  c.classifier_dropout = 0.0;
}

void read(const json& j, EncoderConfig& c, const std::string& source) {
  c.hidden_size = read_int(j, "hidden_size", c.hidden_size, source);
  c.num_hidden_layers = read_int(j, "num_hidden_layers", c.num_hidden_layers, source);
  c.num_attention_heads = read_int(j, "num_attention_heads", c.num_attention_heads, source);
  c.intermediate_size = read_int(j, "intermediate_size", c.intermediate_size, source);
  c.hidden_act = read_string(j, "hidden_activation", c.hidden_act, source);
  c.hidden_dropout_prob = read_double(j, "mlp_dropout", c.hidden_dropout_prob, source);
  c.attention_probs_dropout_prob = read_double(j, "attention_dropout", c.attention_probs_dropout_prob, source);
  c.embedding_dropout = read_double(j, "embedding_dropout", c.embedding_dropout, source);
  c.classifier_dropout = read_double(j, "classifier_dropout", c.classifier_dropout, source);
  c.layer_norm_eps = read_double(j, "norm_eps", c.layer_norm_eps, source);
  c.global_attn_every_n_layers = read_int(j, "global_attn_every_n_layers", c.global_attn_every_n_layers, source);
  c.local_attention = read_int(j, "local_attention", c.local_attention, source);
  c.global_rope_theta = read_double(j, "global_rope_theta", c.global_rope_theta, source);
  c.local_rope_theta = read_double(j, "local_rope_theta", c.local_rope_theta, source);
  c.attention_bias = read_bool(j, "attention_bias", c.attention_bias, source);
  c.mlp_bias = read_bool(j, "mlp_bias", c.mlp_bias, source);
  c.norm_bias = read_bool(j, "norm_bias", c.norm_bias, source);
  c.classifier_bias = read_bool(j, "classifier_bias", c.classifier_bias, source);
  c.classifier_pooling = read_string(j, "classifier_pooling", c.classifier_pooling, source);
  c.classifier_activation = read_string(j, "classifier_activation", c.classifier_activation, source);
  c.initializer_cutoff_factor = read_double(j, "initializer_cutoff_factor", c.initializer_cutoff_factor, source);
  c.tie_word_embeddings = read_bool(j, "tie_word_embeddings", c.tie_word_embeddings, source);
  // transformers >= 4.53 may write per-layer-type RoPE parameters and layer
  // types instead of the scalar keys: read them when present.
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    const json& rope = j["rope_parameters"];
    for (const auto& [type, theta] : {std::pair<const char*, double*>{"full_attention", &c.global_rope_theta},
                                      {"sliding_attention", &c.local_rope_theta}})
      if (rope.contains(type) && rope[type].is_object())
        *theta = read_double(rope[type], "rope_theta", *theta, source + " rope_parameters." + type);
  }
}

void write(const EncoderConfig& c, json& j) {
  j["hidden_size"] = c.hidden_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["intermediate_size"] = c.intermediate_size;
  j["hidden_activation"] = c.hidden_act;
  j["mlp_dropout"] = c.hidden_dropout_prob;
  j["attention_dropout"] = c.attention_probs_dropout_prob;
  j["embedding_dropout"] = c.embedding_dropout;
  j["classifier_dropout"] = c.effective_classifier_dropout();
  j["norm_eps"] = c.layer_norm_eps;
  j["global_attn_every_n_layers"] = c.global_attn_every_n_layers;
  j["local_attention"] = c.local_attention;
  j["global_rope_theta"] = c.global_rope_theta;
  j["local_rope_theta"] = c.local_rope_theta;
  j["attention_bias"] = c.attention_bias;
  j["mlp_bias"] = c.mlp_bias;
  j["norm_bias"] = c.norm_bias;
  j["classifier_bias"] = c.classifier_bias;
  j["classifier_pooling"] = c.classifier_pooling;
  j["classifier_activation"] = c.classifier_activation;
  j["initializer_cutoff_factor"] = c.initializer_cutoff_factor;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
}

void validate(const EncoderConfig& c, const std::string& source) {
  if (c.head_dim() % 2 != 0)
    config_key_error(source, "hidden_size",
                     "the head size hidden_size / num_attention_heads = " + std::to_string(c.head_dim()) +
                         " must be even for rotary position embeddings");
  check_probability(source, "embedding_dropout", c.embedding_dropout);
  check_activation(source, "classifier_activation", c.classifier_activation);
  check_positive(source, "global_attn_every_n_layers", c.global_attn_every_n_layers);
  check_positive(source, "local_attention", c.local_attention);
  if (c.local_attention % 2 != 0)
    config_key_error(source, "local_attention", "must be even (the window is local_attention / 2 on each side)");
  if (!(c.global_rope_theta > 0)) config_key_error(source, "global_rope_theta", "must be > 0");
  if (!(c.local_rope_theta > 0)) config_key_error(source, "local_rope_theta", "must be > 0");
  if (c.classifier_pooling != "cls" && c.classifier_pooling != "mean")
    config_key_error(source, "classifier_pooling",
                     "\"" + clip_for_message(c.classifier_pooling, 40) + "\" is not \"cls\" or \"mean\"");
  if (!(c.initializer_cutoff_factor > 0)) config_key_error(source, "initializer_cutoff_factor", "must be > 0");
}

// ModernBertPreTrainedModel._init_weights: truncated normal with std
// "in" / "embedding" = initializer_range, "out" = initializer_range /
// sqrt(2 num_layers) (the residual projections and the head's dense),
// "final_out" = hidden_size^-0.5 (the classifier); the padding row is not zeroed.
void plan(const EncoderConfig& c, PlanBuilder& b) {
  const int64_t D = c.hidden_size, I = c.intermediate_size;
  const double in_std = c.initializer_range;
  const double out_std = c.initializer_range / std::sqrt(2.0 * static_cast<double>(c.num_hidden_layers));
  b.set_unit(0);
  b.weights(InitKind::kTruncatedNormal, in_std);
  b.embedding("model.embeddings.tok_embeddings.weight", c.vocab_size, D, Slot::kWordEmbeddings, c.pad_token_id,
              /*zero_padding_row=*/false);
  b.norm("model.embeddings.norm", D, Slot::kEmbeddingNormWeight, c.norm_bias);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    b.set_unit(i + 1);
    const std::string layer = "model.layers." + std::to_string(i) + ".";
    if (i > 0) b.norm(layer + "attn_norm", D, Slot::kAttentionNormWeight, c.norm_bias);  // layer 0: Identity
    b.weights(InitKind::kTruncatedNormal, in_std);
    b.linear(layer + "attn.Wqkv", 3 * D, D, Slot::kQkvWeight, c.attention_bias);
    b.weights(InitKind::kTruncatedNormal, out_std);
    b.linear(layer + "attn.Wo", D, D, Slot::kAttentionOutWeight, c.attention_bias);
    b.norm(layer + "mlp_norm", D, Slot::kMlpNormWeight, c.norm_bias);
    b.weights(InitKind::kTruncatedNormal, in_std);
    b.linear(layer + "mlp.Wi", 2 * I, D, Slot::kMlpInWeight, c.mlp_bias);
    b.weights(InitKind::kTruncatedNormal, out_std);
    b.linear(layer + "mlp.Wo", D, I, Slot::kMlpOutWeight, c.mlp_bias);
  }
  b.set_unit(c.head_unit());
  b.norm("model.final_norm", D, Slot::kFinalNormWeight, c.norm_bias);
  b.weights(InitKind::kTruncatedNormal, out_std);
  b.linear("head.dense", D, D, Slot::kHeadDenseWeight, c.classifier_bias);
  b.norm("head.norm", D, Slot::kHeadNormWeight, c.norm_bias);
  b.weights(InitKind::kTruncatedNormal, 1.0 / std::sqrt(static_cast<double>(D)));
  // Every task: the same head (per token for token classification), then the
  // classifier, always with a bias in transformers.
  b.linear("classifier", c.head_outputs(), D, Slot::kClassifierWeight);
}

// No absolute positions (rotary ones in attention), no token types.
EmbeddingRecipe embeddings(const EncoderConfig& c) {
  EmbeddingRecipe r;
  r.absolute_positions = false;
  r.dropout = c.embedding_dropout;
  return r;
}

LayerSpec layer(const EncoderConfig& c, int64_t layer) {
  LayerSpec s = LayerSpec::common(c);
  s.pre_norm = true;
  s.gated_mlp = true;
  s.attention_out_dropout = c.attention_probs_dropout_prob;  // out_drop = Dropout(attention_dropout)
  s.mlp_inner_dropout = c.hidden_dropout_prob;               // mlp_dropout
  const bool global = c.is_global_layer(layer);
  s.rope_theta = global ? c.global_rope_theta : c.local_rope_theta;
  s.half_window = global ? -1 : c.local_attention / 2;
  return s;
}

// final_norm (token-wise: for "cls" pooling only the first tokens), then
// ModernBertPredictionHead: norm(act(dense)); drop; classifier.
PooledHeadRecipe pooled_head(const EncoderConfig& c) {
  PooledHeadRecipe r;
  r.final_norm = true;
  r.mean_pooling = c.classifier_pooling == "mean";
  r.activation = c.classifier_activation;
  r.norm = true;
  r.dropout_out = c.effective_classifier_dropout();
  return r;
}

// final_norm, the prediction head, drop, classifier on every token (question
// answering too).
TokenHeadRecipe token_head(const EncoderConfig& c) {
  TokenHeadRecipe r;
  r.final_norm = true;
  r.prediction_head = true;
  r.activation = c.classifier_activation;
  r.dropout = c.effective_classifier_dropout();
  return r;
}

}  // namespace modernbert_impl

const FamilySpec& modernbert_family() {
  using namespace modernbert_impl;
  static const FamilySpec spec{
      ModelFamily::kModernBert,
      "modernbert",
      {{"modernbert", "ModernBert", {}}},
      "model.",
      {"embeddings.", "layers.", "final_norm."},
      {},
      TokenTypes::kNone,
      /*separate_embedding_width=*/false,
      /*local_attention_layers=*/true,
      {{"hidden_act", "hidden_activation"},
       {"hidden_dropout_prob", "mlp_dropout"},
       {"attention_probs_dropout_prob", "attention_dropout"},
       {"layer_norm_eps", "norm_eps"}},
      {"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_activation",
       "mlp_dropout", "attention_dropout", "embedding_dropout", "classifier_dropout", "norm_eps", "layer_norm_eps",
       "global_attn_every_n_layers", "local_attention", "global_rope_theta", "local_rope_theta", "attention_bias",
       "mlp_bias", "norm_bias", "classifier_bias", "classifier_pooling", "classifier_activation",
       "initializer_cutoff_factor", "tie_word_embeddings", "position_embedding_type"},
      defaults,
      read,
      write,
      validate,
      plan,
      embeddings,
      layer,
      pooled_head,
      token_head};
  return spec;
}

}  // namespace shardtrain
