// EuroBERT (transformers' modeling_eurobert.py, EuroBertConfig; docs/DESIGN.md,
// "Model families"): Llama layers without the causal mask. Pre-norm layers
// with RMSNorm, rotary positions, grouped-query attention (separate q / k / v
// projections, num_key_value_heads), a SwiGLU MLP (gate_proj, up_proj,
// down_proj), optional biases; no position or token-type embeddings, no
// embedding norm, no dropout but on the attention probabilities. Sequence
// classification (dense, GELU, classifier on the bos token, the mean, or
// "late": every token's logits averaged) and token classification (the
// classifier on every token); transformers has no other task class.
#include <string>

#include "model/config_json.h"
#include "model/families/plan_builder.h"
#include "shardtrain/core/text.h"
#include "shardtrain/model/family_spec.h"
#include "shardtrain/tasks/task_rules.h"

namespace shardtrain {
namespace eurobert_impl {

using namespace detail;
using json = nlohmann::json;

// EuroBertConfig's defaults (EuroBERT-210m).
void defaults(EncoderConfig& c) {
  c.vocab_size = 128256;
  c.hidden_size = 768;
  c.intermediate_size = 3072;
  c.num_hidden_layers = 12;
  c.num_attention_heads = 12;
  c.num_key_value_heads = 0;  // num_attention_heads
  c.hidden_act = "silu";
  c.max_position_embeddings = 8192;
  c.type_vocab_size = 0;
  c.layer_norm_eps = 1e-5;
  c.pad_token_id = 128001;
  c.tie_word_embeddings = false;
  c.rope_theta = 250000.0;
  c.attention_bias = false;
  c.mlp_bias = false;
  c.hidden_dropout_prob = 0.0;  // none in the model
  c.attention_probs_dropout_prob = 0.0;
  c.classifier_dropout = 0.0;
  c.classifier_pooling = "late";
}

// Only the default RoPE is implemented: a scaled one ("linear", "dynamic",
// "yarn", "llama3", ...) is refused by its key.
void read_rope_type(const json& j, const char* key, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) return;
  if (!j[key].is_object()) config_key_error(source, key, "must be an object");
  const json& rope = j[key];
  for (const char* type_key : {"rope_type", "type"}) {
    const std::string type = read_string(rope, type_key, "default", source + " " + key);
    if (type != "default")
      config_key_error(source, key,
                       "rope type \"" + clip_for_message(type, 40) +
                           "\" is not supported (only the default RoPE; a scaled RoPE changes the positions)");
  }
}

void read(const json& j, EncoderConfig& c, const std::string& source) {
  c.hidden_size = read_int(j, "hidden_size", c.hidden_size, source);
  c.intermediate_size = read_int(j, "intermediate_size", c.intermediate_size, source);
  c.num_hidden_layers = read_int(j, "num_hidden_layers", c.num_hidden_layers, source);
  c.num_attention_heads = read_int(j, "num_attention_heads", c.num_attention_heads, source);
  c.num_key_value_heads = read_int(j, "num_key_value_heads", c.num_key_value_heads, source);
  if (j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null() && c.num_key_value_heads <= 0)
    config_key_error(source, "num_key_value_heads",
                     "must be > 0 (null or absent: num_attention_heads)");
  c.hidden_act = read_string(j, "hidden_act", c.hidden_act, source);
  c.layer_norm_eps = read_double(j, "rms_norm_eps", c.layer_norm_eps, source);
  c.tie_word_embeddings = read_bool(j, "tie_word_embeddings", c.tie_word_embeddings, source);
  c.attention_bias = read_bool(j, "attention_bias", c.attention_bias, source);
  c.mlp_bias = read_bool(j, "mlp_bias", c.mlp_bias, source);
  c.attention_probs_dropout_prob = read_double(j, "attention_dropout", c.attention_probs_dropout_prob, source);
  c.classifier_pooling = read_string(j, "classifier_pooling", c.classifier_pooling, source);
  // EuroBERT's hub code (trust_remote_code) saved the pooling as clf_pooling,
  // which transformers' EuroBertConfig ignores: a checkpoint trained with it
  // keeps its pooling here; a contradiction is refused.
  if (j.contains("clf_pooling") && !j["clf_pooling"].is_null()) {
    const std::string hub = read_string(j, "clf_pooling", "", source);
    if (!j.contains("classifier_pooling") || j["classifier_pooling"].is_null())
      c.classifier_pooling = hub;
    else if (hub != c.classifier_pooling)
      config_key_error(source, "clf_pooling",
                       "\"" + clip_for_message(hub, 40) + "\" contradicts classifier_pooling \"" +
                           clip_for_message(c.classifier_pooling, 40) + "\"; keep one");
  }
  // RoPE: rope_theta (transformers < 5) or rope_parameters.rope_theta (5).
  c.rope_theta = read_double(j, "rope_theta", c.rope_theta, source);
  read_rope_type(j, "rope_scaling", source);
  read_rope_type(j, "rope_parameters", source);
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object())
    c.rope_theta = read_double(j["rope_parameters"], "rope_theta", c.rope_theta, source + " rope_parameters");
  // An explicit head_dim other than hidden_size / num_attention_heads changes
  // the projections' shapes: not implemented.
  const int64_t head_dim = read_int(j, "head_dim", 0, source);
  if (head_dim != 0 && c.num_attention_heads > 0 && head_dim * c.num_attention_heads != c.hidden_size)
    config_key_error(source, "head_dim",
                     std::to_string(head_dim) + " is not hidden_size / num_attention_heads (" +
                         std::to_string(c.hidden_size) + " / " + std::to_string(c.num_attention_heads) +
                         "); only that head size is supported");
}

void write(const EncoderConfig& c, json& j) {
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads > 0 ? c.num_key_value_heads : c.num_attention_heads;
  j["head_dim"] = c.head_dim();
  j["hidden_act"] = c.hidden_act;
  j["rms_norm_eps"] = c.layer_norm_eps;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["attention_bias"] = c.attention_bias;
  j["mlp_bias"] = c.mlp_bias;
  j["attention_dropout"] = c.attention_probs_dropout_prob;
  j["classifier_pooling"] = c.classifier_pooling;
  j["rope_theta"] = c.rope_theta;
  j["rope_scaling"] = nullptr;
}

void validate(const EncoderConfig& c, const std::string& source) {
  if (c.head_dim() % 2 != 0)
    config_key_error(source, "hidden_size",
                     "the head size hidden_size / num_attention_heads = " + std::to_string(c.head_dim()) +
                         " must be even for rotary position embeddings");
  if (c.num_key_value_heads < 0) config_key_error(source, "num_key_value_heads", "must be > 0");  // set in code
  if (c.num_key_value_heads > 0 && c.num_attention_heads % c.num_key_value_heads != 0)
    config_key_error(source, "num_key_value_heads",
                     std::to_string(c.num_key_value_heads) + " does not divide num_attention_heads (" +
                         std::to_string(c.num_attention_heads) + ")");
  if (!(c.rope_theta > 0)) config_key_error(source, "rope_theta", "must be > 0");
  if (c.classifier_pooling != "bos" && c.classifier_pooling != "mean" && c.classifier_pooling != "late")
    config_key_error(source, "classifier_pooling",
                     "\"" + clip_for_message(c.classifier_pooling, 40) + "\" is not \"bos\", \"mean\" or \"late\"");
  if (c.task == Task::kMultipleChoice || c.task == Task::kQuestionAnswering)
    config_key_error(source, "architectures",
                     std::string("transformers has no EuroBert") + task_rules(c.task).class_suffix() +
                         "; EuroBERT trains sequence classification and token classification");
}

int64_t kv_width(const EncoderConfig& c) {
  return (c.num_key_value_heads > 0 ? c.num_key_value_heads : c.num_attention_heads) * c.head_dim();
}

// LlamaPreTrainedModel._init_weights: every Linear and the embedding N(0,
// initializer_range), biases zero, the padding row zero, RMSNorm weights one.
void plan(const EncoderConfig& c, PlanBuilder& b) {
  const int64_t D = c.hidden_size, I = c.intermediate_size, KV = kv_width(c);
  b.weights(InitKind::kNormal, c.initializer_range);
  b.set_unit(0);
  b.embedding("model.embed_tokens.weight", c.vocab_size, D, Slot::kWordEmbeddings, c.pad_token_id);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    b.set_unit(c.layer_unit(i));
    const std::string layer = "model.layers." + std::to_string(i) + ".";
    b.linear(layer + "self_attn.q_proj", D, D, Slot::kQueryWeight, c.attention_bias);
    b.linear(layer + "self_attn.k_proj", KV, D, Slot::kKeyWeight, c.attention_bias);
    b.linear(layer + "self_attn.v_proj", KV, D, Slot::kValueWeight, c.attention_bias);
    b.linear(layer + "self_attn.o_proj", D, D, Slot::kAttentionOutWeight, c.attention_bias);
    b.linear(layer + "mlp.gate_proj", I, D, Slot::kMlpGateWeight, c.mlp_bias);
    b.linear(layer + "mlp.up_proj", I, D, Slot::kMlpInWeight, c.mlp_bias);
    b.linear(layer + "mlp.down_proj", D, I, Slot::kMlpOutWeight, c.mlp_bias);
    b.norm(layer + "input_layernorm", D, Slot::kAttentionNormWeight, /*bias=*/false);
    b.norm(layer + "post_attention_layernorm", D, Slot::kMlpNormWeight, /*bias=*/false);
  }
  b.set_unit(c.head_unit());
  b.norm("model.norm", D, Slot::kFinalNormWeight, /*bias=*/false);
  // Sequence classification: dense, GELU, classifier (both with a bias);
  // token classification: the classifier alone.
  if (!task_rules(c.task).head_on_tokens()) b.linear("dense", D, D, Slot::kHeadDenseWeight);
  b.linear("classifier", c.head_outputs(), D, Slot::kClassifierWeight);
}

// Word embeddings only: rotary positions in attention, no norm, no dropout.
EmbeddingRecipe embeddings(const EncoderConfig& /*c*/) {
  EmbeddingRecipe r;
  r.absolute_positions = false;
  r.norm = false;
  return r;
}

LayerSpec layer(const EncoderConfig& c, int64_t /*layer*/) {
  LayerSpec s = LayerSpec::common(c);
  s.num_kv_heads = c.num_key_value_heads;
  s.norm = NormKind::kRmsNorm;
  s.pre_norm = true;
  s.gated_mlp = true;
  s.rope_theta = c.rope_theta;
  return s;
}

// model.norm, then pooling (bos: the first token; mean; late: after the
// classifier), dense, GELU (erf), classifier; no dropout.
PooledHeadRecipe pooled_head(const EncoderConfig& c) {
  PooledHeadRecipe r;
  r.final_norm = true;
  r.final_norm_kind = NormKind::kRmsNorm;
  r.mean_pooling = c.classifier_pooling == "mean";
  r.late_pooling = c.classifier_pooling == "late";
  r.activation = "gelu";
  return r;
}

// model.norm, then the classifier on every token.
TokenHeadRecipe token_head(const EncoderConfig& /*c*/) {
  TokenHeadRecipe r;
  r.final_norm = true;
  r.final_norm_kind = NormKind::kRmsNorm;
  return r;
}

}  // namespace eurobert_impl

const FamilySpec& eurobert_family() {
  using namespace eurobert_impl;
  static const FamilySpec spec{
      ModelFamily::kEuroBert,
      "eurobert",
      // PEFT has no default LoRA targets for eurobert: lora.target_modules names them.
      {{"eurobert", "EuroBert", {}}},
      "model.",
      {"embed_tokens.", "layers.", "norm."},
      {},
      TokenTypes::kNone,
      /*separate_embedding_width=*/false,
      /*local_attention_layers=*/false,
      {{"layer_norm_eps", "rms_norm_eps"}, {"attention_probs_dropout_prob", "attention_dropout"}},
      {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
       "hidden_act", "rms_norm_eps", "tie_word_embeddings", "attention_bias", "mlp_bias", "attention_dropout",
       "classifier_pooling", "clf_pooling", "rope_theta", "rope_scaling", "rope_parameters", "head_dim"},
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
