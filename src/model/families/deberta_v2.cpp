// DeBERTa-v2 and v3 (modeling_deberta_v2.py, DebertaV2Config; docs/DESIGN.md,
// "DeBERTa-v2"): BERT's layer with disentangled attention over relative
// positions (content-to-position and position-to-content terms), the
// relative embeddings shared by every layer in a unit of their own, and the
// ContextPooler head.
#include <algorithm>
#include <cmath>

#include "model/config_json.h"
#include "model/families/bert_style.h"
#include "shardtrain/core/text.h"

namespace shardtrain {
namespace deberta_v2_impl {

using namespace detail;
using json = nlohmann::json;

void defaults(EncoderConfig& c) {  // DebertaV2Config: deberta-v2-xlarge's shape
  c.vocab_size = 128100;
  c.hidden_size = 1536;
  c.num_hidden_layers = 24;
  c.num_attention_heads = 24;
  c.intermediate_size = 6144;
  c.type_vocab_size = 0;
  c.layer_norm_eps = 1e-7;
}

std::vector<std::string> keys() {
  std::vector<std::string> k = bert_shape_keys();
  k.insert(k.end(), {"relative_attention", "max_relative_positions", "position_buckets", "pos_att_type",
                     "share_att_key", "norm_rel_ebd", "position_biased_input", "pooler_dropout", "pooler_hidden_act",
                     "pooler_hidden_size", "cls_dropout"});
  return k;
}

// pos_att_type: a list, or the older "p2c|c2p" string (DebertaV2Config splits it, lowercased).
void read_position_terms(const json& j, EncoderConfig& c, const std::string& source) {
  if (!j.contains("pos_att_type") || j["pos_att_type"].is_null()) return;
  const json& types = j["pos_att_type"];
  if (types.is_string()) {
    for (const std::string& part : split_bar_list(types.get<std::string>())) c.pos_att_type.push_back(part);
  } else if (types.is_array()) {
    for (const json& t : types) {
      if (!t.is_string()) config_key_error(source, "pos_att_type", "must be a list of strings (\"c2p\", \"p2c\")");
      c.pos_att_type.push_back(t.get<std::string>());
    }
  } else {
    config_key_error(source, "pos_att_type", "must be a list such as [\"p2c\", \"c2p\"] or a \"p2c|c2p\" string");
  }
}

// Parts of modeling_deberta_v2.py that are not implemented are refused, naming the key.
void refuse_unsupported(const json& j, const EncoderConfig& c, const std::string& source) {
  if (read_int(j, "pooler_hidden_size", c.hidden_size, source) != c.hidden_size)
    config_key_error(source, "pooler_hidden_size",
                     "must equal hidden_size (" + std::to_string(c.hidden_size) +
                         "): the classifier reads the pooler's output as hidden_size wide");
  // Parts of modeling_deberta_v2.py that DeBERTa-v3 checkpoints do not use.
  if (read_int(j, "conv_kernel_size", 0, source) > 0)
    config_key_error(source, "conv_kernel_size",
                     "the convolution after layer 0 (deberta-v2-xlarge / xxlarge) is not supported; DeBERTa-v3 "
                     "checkpoints have none");
  if (read_int(j, "embedding_size", c.hidden_size, source) != c.hidden_size)
    config_key_error(source, "embedding_size", "an embedding width other than hidden_size (embed_proj) is not supported");
  if (read_int(j, "attention_head_size", c.hidden_size / std::max<int64_t>(c.num_attention_heads, 1), source) *
          c.num_attention_heads != c.hidden_size)
    config_key_error(source, "attention_head_size",
                     "a head size other than hidden_size / num_attention_heads is not supported");
}

// DebertaV2Config and the attributes modeling_deberta_v2.py reads with getattr
// defaults (share_att_key, position_buckets, norm_rel_ebd).
void read(const json& j, EncoderConfig& c, const std::string& source) {
  read_bert_shape(j, c, source);
  c.classifier_dropout = read_double(j, "cls_dropout", -1.0, source);
  c.relative_attention = read_bool(j, "relative_attention", c.relative_attention, source);
  c.max_relative_positions = read_int(j, "max_relative_positions", c.max_relative_positions, source);
  c.position_buckets = read_int(j, "position_buckets", c.position_buckets, source);
  c.share_att_key = read_bool(j, "share_att_key", c.share_att_key, source);
  c.norm_rel_ebd = read_string(j, "norm_rel_ebd", c.norm_rel_ebd, source);
  c.position_biased_input = read_bool(j, "position_biased_input", c.position_biased_input, source);
  c.pooler_dropout = read_double(j, "pooler_dropout", c.pooler_dropout, source);
  c.pooler_hidden_act = read_string(j, "pooler_hidden_act", c.pooler_hidden_act, source);
  read_position_terms(j, c, source);
  refuse_unsupported(j, c, source);
}

void write(const EncoderConfig& c, json& j) {
  write_bert_shape(c, j);
  if (c.classifier_dropout >= 0) j["cls_dropout"] = c.classifier_dropout;
  j["relative_attention"] = c.relative_attention;
  j["max_relative_positions"] = c.max_relative_positions;
  j["position_buckets"] = c.position_buckets;
  j["pos_att_type"] = c.pos_att_type;
  j["share_att_key"] = c.share_att_key;
  j["norm_rel_ebd"] = c.norm_rel_ebd;
  j["position_biased_input"] = c.position_biased_input;
  j["pooler_dropout"] = c.pooler_dropout;
  j["pooler_hidden_act"] = c.pooler_hidden_act;
  j["pooler_hidden_size"] = c.hidden_size;
}

// What DeBERTa's attention can be (modeling_deberta_v2.py).
void validate(const EncoderConfig& c, const std::string& source) {
  for (const std::string& type : c.pos_att_type)
    if (type != "c2p" && type != "p2c")
      config_key_error(source, "pos_att_type",
                       "holds \"" + clip_for_message(type, 40) + "\"; DeBERTa-v2 has the terms \"c2p\" and \"p2c\"");
  check_activation(source, "pooler_hidden_act", c.pooler_hidden_act);
  check_probability(source, "pooler_dropout", c.pooler_dropout);
  // make_log_bucket_position keeps distances below mid = position_buckets // 2
  // and divides by mid and by log((max_relative_positions - 1) / mid): 1 (mid
  // 0) makes NaN buckets, and the first step failed with an index error.
  // 2 and 3 (mid 1) are the smallest that work: buckets -1, 0, 1.
  if (c.position_buckets == 0 || c.position_buckets == 1 || c.position_buckets < -1)
    config_key_error(source, "position_buckets",
                     "must be -1 (no buckets) or at least 2 (transformers' make_log_bucket_position divides by "
                     "position_buckets // 2), got " + std::to_string(c.position_buckets));
  if (!c.relative_attention) {
    // HF would create encoder.LayerNorm and never use it: a parameter without gradients.
    if (c.norm_relative_embeddings())
      config_key_error(source, "norm_rel_ebd", "is \"layer_norm\" but relative_attention is false (nothing to normalise)");
    return;
  }
  if (c.pos_att_type.empty())
    config_key_error(source, "pos_att_type",
                     "is empty but relative_attention is true: rel_embeddings would be unused (give [\"p2c\", \"c2p\"])");
  // make_log_bucket_position divides by log((max_relative_positions - 1) / (position_buckets / 2)).
  if (c.position_buckets > 0 && c.relative_positions_limit() - 1 <= c.position_buckets / 2)
    config_key_error(source, "position_buckets",
                     std::to_string(c.position_buckets) + " needs max_relative_positions (or max_position_embeddings) above " +
                         std::to_string(c.position_buckets / 2 + 1) + ", got " +
                         std::to_string(c.relative_positions_limit()));
}

// One deviation from HF's order: the encoder's rel_embeddings and LayerNorm
// come right after the embeddings, in their own unit, where they run (HF
// lists them after the last layer), so the flat layout's gradient buckets
// fill in backward order (docs/DESIGN.md, "DeBERTa-v2"). Names are HF's; a
// folder's order does not matter to loading.
void plan(const EncoderConfig& c, PlanBuilder& b) {
  const int64_t D = c.hidden_size, I = c.intermediate_size;
  const bool relative = c.relative_attention;
  b.weights(InitKind::kNormal, c.initializer_range);
  b.set_unit(0);
  b.embedding("deberta.embeddings.word_embeddings.weight", c.vocab_size, D, Slot::kWordEmbeddings, c.pad_token_id);
  if (c.position_biased_input)
    b.embedding("deberta.embeddings.position_embeddings.weight", c.max_position_embeddings, D,
                Slot::kPositionEmbeddings);
  if (c.has_token_types())
    b.embedding("deberta.embeddings.token_type_embeddings.weight", c.type_vocab_size, D, Slot::kTokenTypeEmbeddings);
  b.norm("deberta.embeddings.LayerNorm", D, Slot::kEmbeddingNormWeight);
  if (relative) {
    b.set_unit(1);
    b.embedding("deberta.encoder.rel_embeddings.weight", 2 * c.relative_span(), D, Slot::kRelativeEmbeddings);
    if (c.norm_relative_embeddings()) b.norm("deberta.encoder.LayerNorm", D, Slot::kRelativeNormWeight);
  }
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    b.set_unit(c.layer_unit(i));
    const std::string layer = "deberta.encoder.layer." + std::to_string(i) + ".";
    b.linear(layer + "attention.self.query_proj", D, D, Slot::kQueryWeight);
    b.linear(layer + "attention.self.key_proj", D, D, Slot::kKeyWeight);
    b.linear(layer + "attention.self.value_proj", D, D, Slot::kValueWeight);
    if (relative && !c.share_att_key) {
      if (c.has_position_term("c2p")) b.linear(layer + "attention.self.pos_key_proj", D, D, Slot::kPositionKeyWeight);
      if (c.has_position_term("p2c"))
        b.linear(layer + "attention.self.pos_query_proj", D, D, Slot::kPositionQueryWeight);
    }
    plan_bert_layer_after_attention(b, layer, D, I);
  }
  // Sequence classification and multiple choice: the ContextPooler; token
  // classification: dropout and the classifier on every token; question
  // answering: qa_outputs on every token.
  plan_dense_classifier_heads(c, b, "pooler.dense");
}

// DebertaV2Embeddings: words + positions (position_biased_input) + token
// types (type_vocab_size > 0). HF then multiplies padding rows by 0: only
// padding tokens change, which no real token attends to, so it is left out.
EmbeddingRecipe embeddings(const EncoderConfig& c) {
  EmbeddingRecipe r;
  r.absolute_positions = c.position_biased_input;
  r.positions_before_types = true;
  r.dropout = c.hidden_dropout_prob;
  return r;
}

LayerSpec layer(const EncoderConfig& c, int64_t /*layer*/) {
  LayerSpec s = LayerSpec::common(c);
  s.attention_out_dropout = c.hidden_dropout_prob;
  s.mlp_out_dropout = c.hidden_dropout_prob;
  s.disentangled = true;
  // HF counts the terms named in pos_att_type, with or without relative_attention.
  const int terms = (c.has_position_term("c2p") ? 1 : 0) + (c.has_position_term("p2c") ? 1 : 0);
  s.attention_scale = std::sqrt(static_cast<double>(c.head_dim() * (1 + terms)));
  s.content_to_position = c.relative_attention && c.has_position_term("c2p");
  s.position_to_content = c.relative_attention && c.has_position_term("p2c");
  s.share_att_key = c.share_att_key;
  s.position_dropout = c.hidden_dropout_prob;
  return s;
}

// ContextPooler (dropout, dense, act), dropout (cls_dropout), classifier: both sequence-level tasks.
PooledHeadRecipe pooled_head(const EncoderConfig& c) {
  PooledHeadRecipe r;
  r.dropout_in = c.pooler_dropout;
  r.activation = c.pooler_hidden_act;
  r.dropout_out = c.effective_classifier_dropout();
  return r;
}

// Token classification: dropout (hidden_dropout_prob), classifier; question
// answering: qa_outputs straight on the hidden states.
TokenHeadRecipe token_head(const EncoderConfig& c) {
  TokenHeadRecipe r;
  r.dropout = c.task == Task::kQuestionAnswering ? 0.0 : c.hidden_dropout_prob;
  return r;
}

}  // namespace deberta_v2_impl

const FamilySpec& deberta_v2_family() {
  using namespace deberta_v2_impl;
  static const FamilySpec spec{
      ModelFamily::kDebertaV2,
      "deberta-v2",
      {{"deberta-v2", "DebertaV2", {"query_proj", "value_proj"}}},
      "deberta.",
      {"embeddings.", "encoder."},  // its pooler belongs to the classifier
      // DebertaV2PreTrainedModel._keys_to_ignore_on_load_unexpected: position
      // embeddings of a checkpoint whose model has none (position_biased_input false).
      {"position_embeddings"},
      TokenTypes::kOptional,
      /*separate_embedding_width=*/false,
      /*local_attention_layers=*/false,
      {{"classifier_dropout", "cls_dropout"}},
      keys(),
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
