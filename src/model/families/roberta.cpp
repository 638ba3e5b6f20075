// RoBERTa, and XLM-R and CamemBERT under their own model_type
// (modeling_roberta.py; docs/DESIGN.md, "Model families"): BERT's encoder
// with positions that start after the padding index and its own heads.
#include "model/config_json.h"
#include "model/families/bert_style.h"

namespace shardtrain {
namespace roberta_impl {

using namespace detail;

void defaults(EncoderConfig& c) {
  c.vocab_size = c.model_type == "xlm-roberta" ? 250002 : c.model_type == "camembert" ? 32005 : 50265;
  c.pad_token_id = 1;
}

void validate(const EncoderConfig& c, const std::string& source) {
  validate_bert_style(c, source);
  if (c.max_position_embeddings <= c.pad_token_id + 1)
    config_key_error(source, "max_position_embeddings",
                     "RoBERTa positions start after pad_token_id (" + std::to_string(c.pad_token_id) +
                         "), so max_position_embeddings must exceed pad_token_id + 1");
}

// RobertaClassificationHead (classifier.dense, classifier.out_proj); multiple
// choice: the pooler.
void plan(const EncoderConfig& c, PlanBuilder& b) {
  plan_bert_embeddings(c, b, c.pad_token_id);  // the position embedding has padding_idx = pad_token_id too
  plan_bert_layers(c, b);
  plan_bert_heads(c, b, "classifier.dense", "classifier.out_proj", c.base_prefix() + "pooler.dense");
}

EmbeddingRecipe embeddings(const EncoderConfig& c) {
  EmbeddingRecipe r = bert_embeddings(c);
  r.positions_after_padding = true;
  return r;
}

// RobertaClassificationHead: dropout, dense, tanh, dropout, out_proj;
// RobertaForMultipleChoice: the pooler, dropout (hidden_dropout_prob), classifier.
PooledHeadRecipe pooled_head(const EncoderConfig& c) { return classification_head(c, "tanh", c.hidden_dropout_prob); }

}  // namespace roberta_impl

const FamilySpec& roberta_family() {
  using namespace roberta_impl;
  static const FamilySpec spec{
      ModelFamily::kRoberta,
      "roberta",
      {{"roberta", "Roberta", {"query", "value"}},
       {"xlm-roberta", "XLMRoberta", {"query", "value"}},
       {"camembert", "Camembert", {}}},
      "roberta.",
      {"embeddings.", "encoder.", "pooler."},
      {},
      TokenTypes::kRequired,
      /*separate_embedding_width=*/false,
      /*local_attention_layers=*/false,
      {},
      bert_style_keys(),
      defaults,
      read_bert_style,
      write_bert_style,
      validate,
      plan,
      embeddings,
      post_norm_layer,
      pooled_head,
      bert_token_head};
  return spec;
}

}  // namespace shardtrain
