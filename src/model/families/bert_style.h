// Private to the model layer: what BERT, RoBERTa and ELECTRA share (their
// transformers code copies modeling_bert.py's embeddings and post-norm
// layer), and the parts DeBERTa-v2 reuses: the encoder's keys under BERT's
// names, the layer's parameters after self-attention. Each family's own file
// (src/model/families/<family>.cpp) composes these.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/families/plan_builder.h"
#include "shardtrain/model/family_spec.h"

namespace shardtrain::detail {

// hidden_size, num_hidden_layers, ..., layer_norm_eps: the encoder's shape and
// dropouts under BERT's key names (BERT, RoBERTa, ELECTRA, DeBERTa).
std::vector<std::string> bert_shape_keys();
void read_bert_shape(const nlohmann::json& j, EncoderConfig& c, const std::string& source);
void write_bert_shape(const EncoderConfig& c, nlohmann::json& j);

// BERT, RoBERTa, ELECTRA: the shape, classifier_dropout (null: hidden_dropout_prob)
// and position_embedding_type ("absolute" only).
std::vector<std::string> bert_style_keys();
void read_bert_style(const nlohmann::json& j, EncoderConfig& c, const std::string& source);
void write_bert_style(const EncoderConfig& c, nlohmann::json& j);
void validate_bert_style(const EncoderConfig& c, const std::string& source);

// The parameters of modeling_bert.py's embeddings (word, position, token
// type, LayerNorm) under `base` (unit 0); the position embedding's padding
// row is `position_padding_row` (RoBERTa: pad_token_id; else -1).
void plan_bert_embeddings(const EncoderConfig& c, PlanBuilder& b, int64_t position_padding_row);
// The N post-norm layers (units 1..N) under base + "encoder.layer.<i>.".
void plan_bert_layers(const EncoderConfig& c, PlanBuilder& b);
// What follows the self-attention's projections in modeling_bert.py's layer
// (and DeBERTa's): the attention output, the MLP, their LayerNorms.
void plan_bert_layer_after_attention(PlanBuilder& b, const std::string& layer, int64_t D, int64_t I);

// The head of each task in modeling_bert.py's classes: sequence
// classification `seq_dense` + `seq_classifier`; multiple choice
// `choice_dense` + "classifier"; token classification "classifier"; question
// answering "qa_outputs" (unit N + 1).
void plan_bert_heads(const EncoderConfig& c, PlanBuilder& b, const std::string& seq_dense,
                     const std::string& seq_classifier, const std::string& choice_dense);
// A dense in front of the classifier on the first token (sequence
// classification, multiple choice), the classifier alone on every token
// (token classification), qa_outputs (question answering): DistilBERT, DeBERTa.
void plan_dense_classifier_heads(const EncoderConfig& c, PlanBuilder& b, const std::string& dense);

// RobertaClassificationHead / ElectraClassificationHead: dropout, dense,
// `activation`, dropout, out_proj (classifier_dropout, else
// hidden_dropout_prob); their multiple choice: dense, `activation`, dropout
// (`choice_dropout`), classifier.
PooledHeadRecipe classification_head(const EncoderConfig& c, const char* activation, double choice_dropout);

// BertPooler (dense + tanh on the first token), dropout (classifier_dropout,
// else hidden_dropout_prob), classifier: BERT's and GTE's sequence-level head.
PooledHeadRecipe bert_pooler_head(const EncoderConfig& c);

// The post-norm layer: dropout after the attention output and after the MLP
// (hidden_dropout_prob).
LayerSpec post_norm_layer(const EncoderConfig& c, int64_t layer);
// Words + token types + positions, LayerNorm, dropout (hidden_dropout_prob).
EmbeddingRecipe bert_embeddings(const EncoderConfig& c);
// <Family>ForTokenClassification: dropout (classifier_dropout, else
// hidden_dropout_prob), classifier; <Family>ForQuestionAnswering: qa_outputs
// straight on the hidden states.
TokenHeadRecipe bert_token_head(const EncoderConfig& c);

}  // namespace shardtrain::detail
