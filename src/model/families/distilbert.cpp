// DistilBERT (modeling_distilbert.py, DistilBertConfig; docs/DESIGN.md,
// "Model families"): six post-norm layers under their own names, no token
// types, optionally fixed sinusoidal positions; its config.json names the
// encoder's keys its own way (dim, n_layers, ...).
#include "model/config_json.h"
#include "model/families/bert_style.h"

namespace shardtrain {
namespace distilbert_impl {

using namespace detail;
using json = nlohmann::json;

void defaults(EncoderConfig& c) {
  c.num_hidden_layers = 6;
  c.type_vocab_size = 0;
  c.classifier_dropout = 0.2;  // seq_classif_dropout
}

void read(const json& j, EncoderConfig& c, const std::string& source) {
  c.hidden_size = read_int(j, "dim", c.hidden_size, source);
  c.num_hidden_layers = read_int(j, "n_layers", c.num_hidden_layers, source);
  c.num_attention_heads = read_int(j, "n_heads", c.num_attention_heads, source);
  c.intermediate_size = read_int(j, "hidden_dim", c.intermediate_size, source);
  c.hidden_act = read_string(j, "activation", c.hidden_act, source);
  c.hidden_dropout_prob = read_double(j, "dropout", c.hidden_dropout_prob, source);
  c.attention_probs_dropout_prob = read_double(j, "attention_dropout", c.attention_probs_dropout_prob, source);
  c.classifier_dropout = read_double(j, "seq_classif_dropout", c.classifier_dropout, source);
  c.qa_dropout = read_double(j, "qa_dropout", c.qa_dropout, source);
  c.sinusoidal_pos_embds = read_bool(j, "sinusoidal_pos_embds", c.sinusoidal_pos_embds, source);
}

void write(const EncoderConfig& c, json& j) {
  j["dim"] = c.hidden_size;
  j["n_layers"] = c.num_hidden_layers;
  j["n_heads"] = c.num_attention_heads;
  j["hidden_dim"] = c.intermediate_size;
  j["activation"] = c.hidden_act;
  j["dropout"] = c.hidden_dropout_prob;
  j["attention_dropout"] = c.attention_probs_dropout_prob;
  j["seq_classif_dropout"] = c.effective_classifier_dropout();
  j["qa_dropout"] = c.qa_dropout;
  j["sinusoidal_pos_embds"] = c.sinusoidal_pos_embds;
}

void validate(const EncoderConfig& c, const std::string& source) { check_probability(source, "qa_dropout", c.qa_dropout); }

void plan(const EncoderConfig& c, PlanBuilder& b) {
  const int64_t D = c.hidden_size, I = c.intermediate_size;
  b.weights(InitKind::kNormal, c.initializer_range);
  b.set_unit(0);
  b.embedding("distilbert.embeddings.word_embeddings.weight", c.vocab_size, D, Slot::kWordEmbeddings,
              c.pad_token_id);
  if (c.sinusoidal_pos_embds) {
    b.add("distilbert.embeddings.position_embeddings.weight", {c.max_position_embeddings, D},
          Slot::kPositionEmbeddings, InitKind::kSinusoidal);
  } else {
    b.embedding("distilbert.embeddings.position_embeddings.weight", c.max_position_embeddings, D,
                Slot::kPositionEmbeddings);
  }
  b.norm("distilbert.embeddings.LayerNorm", D, Slot::kEmbeddingNormWeight);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    b.set_unit(i + 1);
    const std::string layer = "distilbert.transformer.layer." + std::to_string(i) + ".";
    b.linear(layer + "attention.q_lin", D, D, Slot::kQueryWeight);
    b.linear(layer + "attention.k_lin", D, D, Slot::kKeyWeight);
    b.linear(layer + "attention.v_lin", D, D, Slot::kValueWeight);
    b.linear(layer + "attention.out_lin", D, D, Slot::kAttentionOutWeight);
    b.norm(layer + "sa_layer_norm", D, Slot::kAttentionNormWeight);
    b.linear(layer + "ffn.lin1", I, D, Slot::kMlpInWeight);
    b.linear(layer + "ffn.lin2", D, I, Slot::kMlpOutWeight);
    b.norm(layer + "output_layer_norm", D, Slot::kMlpNormWeight);
  }
  // Token classification: dropout and classifier on every token; the others:
  // pre_classifier, ReLU, dropout, classifier on the first token.
  // Question answering: dropout (qa_dropout) and qa_outputs on every token.
  plan_dense_classifier_heads(c, b, "pre_classifier");
}

EmbeddingRecipe embeddings(const EncoderConfig& c) {
  EmbeddingRecipe r;
  r.dropout = c.hidden_dropout_prob;
  return r;
}

LayerSpec layer(const EncoderConfig& c, int64_t /*layer*/) {
  LayerSpec s = LayerSpec::common(c);
  // No dropout after out_lin; LayerNorm eps fixed at 1e-12 in modeling_distilbert.py.
  s.mlp_out_dropout = c.hidden_dropout_prob;
  s.norm_eps = 1e-12;
  return s;
}

// pre_classifier, ReLU, dropout (seq_classif_dropout), classifier: both sequence-level tasks.
PooledHeadRecipe pooled_head(const EncoderConfig& c) {
  PooledHeadRecipe r;
  r.activation = "relu";
  r.dropout_out = c.effective_classifier_dropout();
  return r;
}

// Token classification: dropout (config.dropout), classifier; question
// answering: dropout (qa_dropout), qa_outputs.
TokenHeadRecipe token_head(const EncoderConfig& c) {
  TokenHeadRecipe r;
  r.dropout = c.task == Task::kQuestionAnswering ? c.qa_dropout : c.hidden_dropout_prob;
  return r;
}

}  // namespace distilbert_impl

const FamilySpec& distilbert_family() {
  using namespace distilbert_impl;
  static const FamilySpec spec{
      ModelFamily::kDistilBert,
      "distilbert",
      {{"distilbert", "DistilBert", {}}},
      "distilbert.",
      {"embeddings.", "transformer."},
      {},
      TokenTypes::kNone,
      /*separate_embedding_width=*/false,
      /*local_attention_layers=*/false,
      {{"hidden_size", "dim"},
       {"num_hidden_layers", "n_layers"},
       {"num_attention_heads", "n_heads"},
       {"intermediate_size", "hidden_dim"},
       {"hidden_act", "activation"},
       {"hidden_dropout_prob", "dropout"},
       {"attention_probs_dropout_prob", "attention_dropout"},
       {"classifier_dropout", "seq_classif_dropout"}},
      {"dim", "n_layers", "n_heads", "hidden_dim", "activation", "dropout", "attention_dropout", "seq_classif_dropout",
       "sinusoidal_pos_embds", "qa_dropout"},
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
