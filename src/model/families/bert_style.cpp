// What BERT, RoBERTa and ELECTRA share (model/families/bert_style.h).
#include "model/families/bert_style.h"

#include "model/config_json.h"
#include "shardtrain/core/text.h"

namespace shardtrain::detail {

using json = nlohmann::json;

std::vector<std::string> bert_shape_keys() {
  return {"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
          "hidden_dropout_prob", "attention_probs_dropout_prob", "type_vocab_size", "layer_norm_eps"};
}

void read_bert_shape(const json& j, EncoderConfig& c, const std::string& source) {
  c.hidden_size = read_int(j, "hidden_size", c.hidden_size, source);
  c.num_hidden_layers = read_int(j, "num_hidden_layers", c.num_hidden_layers, source);
  c.num_attention_heads = read_int(j, "num_attention_heads", c.num_attention_heads, source);
  c.intermediate_size = read_int(j, "intermediate_size", c.intermediate_size, source);
  c.hidden_act = read_string(j, "hidden_act", c.hidden_act, source);
  c.hidden_dropout_prob = read_double(j, "hidden_dropout_prob", c.hidden_dropout_prob, source);
  c.attention_probs_dropout_prob =
      read_double(j, "attention_probs_dropout_prob", c.attention_probs_dropout_prob, source);
  c.type_vocab_size = read_int(j, "type_vocab_size", c.type_vocab_size, source);
  c.layer_norm_eps = read_double(j, "layer_norm_eps", c.layer_norm_eps, source);
}

void write_bert_shape(const EncoderConfig& c, json& j) {
  j["hidden_size"] = c.hidden_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["intermediate_size"] = c.intermediate_size;
  j["hidden_act"] = c.hidden_act;
  j["hidden_dropout_prob"] = c.hidden_dropout_prob;
  j["attention_probs_dropout_prob"] = c.attention_probs_dropout_prob;
  j["type_vocab_size"] = c.type_vocab_size;
  j["layer_norm_eps"] = c.layer_norm_eps;
}

std::vector<std::string> bert_style_keys() {
  std::vector<std::string> keys = bert_shape_keys();
  keys.insert(keys.end(), {"classifier_dropout", "position_embedding_type"});
  return keys;
}

void read_bert_style(const json& j, EncoderConfig& c, const std::string& source) {
  read_bert_shape(j, c, source);
  c.classifier_dropout = read_double(j, "classifier_dropout", -1.0, source);
  c.position_embedding_type = read_string(j, "position_embedding_type", c.position_embedding_type, source);
}

void write_bert_style(const EncoderConfig& c, json& j) {
  write_bert_shape(c, j);
  j["classifier_dropout"] = c.classifier_dropout >= 0 ? json(c.classifier_dropout) : json(nullptr);
  j["position_embedding_type"] = c.position_embedding_type;
}

void validate_bert_style(const EncoderConfig& c, const std::string& source) {
  if (c.position_embedding_type != "absolute")
    config_key_error(source, "position_embedding_type",
                     "\"" + clip_for_message(c.position_embedding_type, 60) +
                         "\" is not supported; only \"absolute\" is implemented");
}

void plan_bert_embeddings(const EncoderConfig& c, PlanBuilder& b, int64_t position_padding_row) {
  const std::string base = c.base_prefix();
  const int64_t E = c.embedding_width();
  b.weights(InitKind::kNormal, c.initializer_range);
  b.set_unit(0);
  b.embedding(base + "embeddings.word_embeddings.weight", c.vocab_size, E, Slot::kWordEmbeddings, c.pad_token_id);
  b.embedding(base + "embeddings.position_embeddings.weight", c.max_position_embeddings, E, Slot::kPositionEmbeddings,
              position_padding_row);
  b.embedding(base + "embeddings.token_type_embeddings.weight", c.type_vocab_size, E, Slot::kTokenTypeEmbeddings);
  b.norm(base + "embeddings.LayerNorm", E, Slot::kEmbeddingNormWeight);
}

void plan_bert_layers(const EncoderConfig& c, PlanBuilder& b) {
  const int64_t D = c.hidden_size, I = c.intermediate_size;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    b.set_unit(i + 1);
    const std::string layer = c.base_prefix() + "encoder.layer." + std::to_string(i) + ".";
    b.linear(layer + "attention.self.query", D, D, Slot::kQueryWeight);
    b.linear(layer + "attention.self.key", D, D, Slot::kKeyWeight);
    b.linear(layer + "attention.self.value", D, D, Slot::kValueWeight);
    plan_bert_layer_after_attention(b, layer, D, I);
  }
}

void plan_bert_layer_after_attention(PlanBuilder& b, const std::string& layer, int64_t D, int64_t I) {
  b.linear(layer + "attention.output.dense", D, D, Slot::kAttentionOutWeight);
  b.norm(layer + "attention.output.LayerNorm", D, Slot::kAttentionNormWeight);
  b.linear(layer + "intermediate.dense", I, D, Slot::kMlpInWeight);
  b.linear(layer + "output.dense", D, I, Slot::kMlpOutWeight);
  b.norm(layer + "output.LayerNorm", D, Slot::kMlpNormWeight);
}

void plan_bert_heads(const EncoderConfig& c, PlanBuilder& b, const std::string& seq_dense,
                     const std::string& seq_classifier, const std::string& choice_dense) {
  b.set_unit(c.head_unit());
  const int64_t D = c.hidden_size, C = c.head_outputs();
  switch (c.task) {
    case Task::kSequenceClassification:
      b.linear(seq_dense, D, D, Slot::kHeadDenseWeight);
      b.linear(seq_classifier, C, D, Slot::kClassifierWeight);
      break;
    case Task::kMultipleChoice:
      b.linear(choice_dense, D, D, Slot::kHeadDenseWeight);
      b.linear("classifier", C, D, Slot::kClassifierWeight);
      break;
    case Task::kTokenClassification:  // no pooler: dropout, classifier on every token
      b.linear("classifier", C, D, Slot::kClassifierWeight);
      break;
    case Task::kQuestionAnswering:  // qa_outputs on every token: start and end logits
      b.linear("qa_outputs", C, D, Slot::kClassifierWeight);
      break;
  }
}

void plan_dense_classifier_heads(const EncoderConfig& c, PlanBuilder& b, const std::string& dense) {
  b.set_unit(c.head_unit());
  const int64_t D = c.hidden_size, C = c.head_outputs();
  if (c.task == Task::kQuestionAnswering) {
    b.linear("qa_outputs", C, D, Slot::kClassifierWeight);
    return;
  }
  if (c.task != Task::kTokenClassification) b.linear(dense, D, D, Slot::kHeadDenseWeight);
  b.linear("classifier", C, D, Slot::kClassifierWeight);
}

PooledHeadRecipe classification_head(const EncoderConfig& c, const char* activation, double choice_dropout) {
  PooledHeadRecipe r;
  r.activation = activation;
  if (c.task == Task::kMultipleChoice)
    r.dropout_out = choice_dropout;
  else
    r.dropout_in = r.dropout_out = c.effective_classifier_dropout();
  return r;
}

PooledHeadRecipe bert_pooler_head(const EncoderConfig& c) {
  PooledHeadRecipe r;
  r.activation = "tanh";
  r.dropout_out = c.effective_classifier_dropout();
  return r;
}

LayerSpec post_norm_layer(const EncoderConfig& c, int64_t /*layer*/) {
  LayerSpec s = LayerSpec::common(c);
  s.attention_out_dropout = c.hidden_dropout_prob;
  s.mlp_out_dropout = c.hidden_dropout_prob;
  return s;
}

EmbeddingRecipe bert_embeddings(const EncoderConfig& c) {
  EmbeddingRecipe r;
  r.dropout = c.hidden_dropout_prob;
  return r;
}

TokenHeadRecipe bert_token_head(const EncoderConfig& c) {
  TokenHeadRecipe r;
  r.dropout = c.task == Task::kQuestionAnswering ? 0.0 : c.effective_classifier_dropout();
  return r;
}

}  // namespace shardtrain::detail
