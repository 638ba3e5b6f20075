// BERT (modeling_bert.py, BertConfig): the reference layout the other
// families are told against (docs/DESIGN.md, "Model families").
#include "model/families/bert_style.h"

namespace shardtrain {
namespace bert_impl {

using namespace detail;

void defaults(EncoderConfig&) {}  // EncoderConfig's own defaults are BertConfig's

// The pooler (dense + tanh) in front of the classifier of both sequence-level tasks.
void plan(const EncoderConfig& c, PlanBuilder& b) {
  plan_bert_embeddings(c, b, -1);
  plan_bert_layers(c, b);
  plan_bert_heads(c, b, "bert.pooler.dense", "classifier", "bert.pooler.dense");
}

}  // namespace bert_impl

const FamilySpec& bert_family() {
  using namespace bert_impl;
  static const FamilySpec spec{
      ModelFamily::kBert,
      "bert",
      {{"bert", "Bert", {"query", "value"}}},
      "bert.",
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
      validate_bert_style,
      plan,
      bert_embeddings,
      post_norm_layer,
      bert_pooler_head,
      bert_token_head};
  return spec;
}

}  // namespace shardtrain
