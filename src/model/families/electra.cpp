// ELECTRA (modeling_electra.py, ElectraConfig; docs/DESIGN.md, "Model
// families"): BERT's encoder behind embeddings embedding_size wide, projected
// to hidden_size (embeddings_project), with RoBERTa-style heads in GELU.
#include "model/config_json.h"
#include "model/families/bert_style.h"
#include "shardtrain/core/text.h"

namespace shardtrain {
namespace electra_impl {

using namespace detail;
using json = nlohmann::json;

void defaults(EncoderConfig& c) {
  c.embedding_size = 128;
  c.hidden_size = 256;
  c.num_attention_heads = 4;
  c.intermediate_size = 1024;
}

std::vector<std::string> keys() {
  std::vector<std::string> k = bert_style_keys();
  k.insert(k.end(), {"embedding_size", "summary_last_dropout"});
  return k;
}

// ELECTRA's multiple-choice head is transformers' SequenceSummary with
// ElectraConfig's settings (first token, a projection to hidden_size, GELU,
// the last dropout); other settings would change its shapes or maths.
void check_summary(const json& j, const std::string& source) {
  auto expect = [&](const char* key, const json& wanted) {
    if (j.contains(key) && j[key] != wanted)
      config_key_error(source, key,
                       "is " + clip_for_message(j[key].dump(), 40) + "; ELECTRA's multiple-choice head is built for " +
                           wanted.dump() + " (ElectraConfig's default) only");
  };
  expect("summary_type", "first");
  expect("summary_use_proj", true);
  expect("summary_activation", "gelu");
  if (j.contains("summary_proj_to_labels") && j["summary_proj_to_labels"] == true)
    config_key_error(source, "summary_proj_to_labels",
                     "is true; ELECTRA's multiple-choice head projects to hidden_size (the key unset)");
  if (j.contains("summary_first_dropout") && j["summary_first_dropout"].is_number() &&
      j["summary_first_dropout"].get<double>() > 0)
    config_key_error(source, "summary_first_dropout", "is set; only summary_last_dropout is supported");
}

void read(const json& j, EncoderConfig& c, const std::string& source) {
  read_bert_style(j, c, source);
  c.embedding_size = read_int(j, "embedding_size", c.embedding_size, source);
  c.summary_last_dropout = read_double(j, "summary_last_dropout", c.summary_last_dropout, source);
  check_summary(j, source);
}

void write(const EncoderConfig& c, json& j) {
  write_bert_style(c, j);
  j["embedding_size"] = c.embedding_size;
  j["summary_last_dropout"] = c.summary_last_dropout;
}

void validate(const EncoderConfig& c, const std::string& source) {
  check_positive(source, "embedding_size", c.embedding_size);
  check_probability(source, "summary_last_dropout", c.summary_last_dropout);
  validate_bert_style(c, source);
}

// ElectraClassificationHead (classifier.dense, classifier.out_proj); multiple
// choice: SequenceSummary's projection.
void plan(const EncoderConfig& c, PlanBuilder& b) {
  plan_bert_embeddings(c, b, -1);
  if (c.embedding_size != c.hidden_size)  // still unit 0
    b.linear("electra.embeddings_project", c.hidden_size, c.embedding_size, Slot::kEmbeddingProjectWeight);
  plan_bert_layers(c, b);
  plan_bert_heads(c, b, "classifier.dense", "classifier.out_proj", "sequence_summary.summary");
}

EmbeddingRecipe embeddings(const EncoderConfig& c) {
  EmbeddingRecipe r = bert_embeddings(c);
  r.projection = c.embedding_size != c.hidden_size;
  return r;
}

// ElectraClassificationHead: as RoBERTa's, with GELU; ElectraForMultipleChoice:
// SequenceSummary (first token, summary, GELU, last dropout), classifier.
PooledHeadRecipe pooled_head(const EncoderConfig& c) { return classification_head(c, "gelu", c.summary_last_dropout); }

}  // namespace electra_impl

const FamilySpec& electra_family() {
  using namespace electra_impl;
  static const FamilySpec spec{
      ModelFamily::kElectra,
      "electra",
      {{"electra", "Electra", {"query", "value"}}},
      "electra.",
      {"embeddings.", "embeddings_project.", "encoder."},
      {},
      TokenTypes::kRequired,
      /*separate_embedding_width=*/true,
      /*local_attention_layers=*/false,
      {},
      keys(),
      defaults,
      read,
      write,
      validate,
      plan,
      embeddings,
      post_norm_layer,
      pooled_head,
      bert_token_head};
  return spec;
}

}  // namespace shardtrain
