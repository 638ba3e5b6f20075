// Each family's head per task (docs/DESIGN.md, "Model families" and "Tasks");
// transformers' names in comments.
#include <ATen/ATen.h>

#include "model/encoder.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/model/dropout.h"

namespace shardtrain::detail {

at::Tensor classifier_head(const EncoderConfig& c, const UnitWeights& w, const at::Tensor& pooled, bool training) {
  const double p = c.effective_classifier_dropout();
  auto dense = [&](const at::Tensor& x) { return at::linear(x, w[Slot::kHeadDenseWeight], w[Slot::kHeadDenseBias]); };
  auto classify = [&](const at::Tensor& x) {
    return at::linear(x, w[Slot::kClassifierWeight], w[Slot::kClassifierBias]);
  };
  const bool choice = c.task == Task::kMultipleChoice;
  switch (c.family) {
    case ModelFamily::kBert:  // BertPooler (tanh), dropout, classifier (both tasks)
      return classify(shardtrain::dropout(at::tanh(dense(pooled)), p, training));
    case ModelFamily::kRoberta:
      // RobertaForMultipleChoice: the pooler, dropout (hidden_dropout_prob), classifier.
      if (choice) return classify(shardtrain::dropout(at::tanh(dense(pooled)), c.hidden_dropout_prob, training));
      // RobertaClassificationHead: dropout, dense, tanh, dropout, out_proj.
      return classify(shardtrain::dropout(at::tanh(dense(shardtrain::dropout(pooled, p, training))), p, training));
    case ModelFamily::kElectra:
      // ElectraForMultipleChoice: SequenceSummary (first token, summary, GELU,
      // last dropout), classifier.
      if (choice) return classify(shardtrain::dropout(at::gelu(dense(pooled)), c.summary_last_dropout, training));
      // ElectraClassificationHead: as RoBERTa's with GELU.
      return classify(shardtrain::dropout(at::gelu(dense(shardtrain::dropout(pooled, p, training))), p, training));
    case ModelFamily::kDistilBert:  // pre_classifier, ReLU, dropout (seq_classif_dropout), classifier (both tasks)
      return classify(shardtrain::dropout(at::relu(dense(pooled)), p, training));
    case ModelFamily::kModernBert: {  // ModernBertPredictionHead: norm(act(dense)); drop; classifier (both tasks)
      const at::Tensor head = layer_norm(apply_activation(c.classifier_activation, dense(pooled)),
                                         w[Slot::kHeadNormWeight], w[Slot::kHeadNormBias], c.layer_norm_eps);
      return classify(shardtrain::dropout(head, p, training));
    }
    case ModelFamily::kDebertaV2: {  // ContextPooler (dropout, dense, act), dropout (cls_dropout), classifier (both tasks)
      const at::Tensor pooled_dense = dense(shardtrain::dropout(pooled, c.pooler_dropout, training));
      return classify(shardtrain::dropout(apply_activation(c.pooler_hidden_act, pooled_dense), p, training));
    }
  }
  return {};
}

at::Tensor token_head(const EncoderConfig& c, const UnitWeights& w, const at::Tensor& hidden, bool training) {
  auto classify = [&](const at::Tensor& x) {
    return at::linear(x, w[Slot::kClassifierWeight], w[Slot::kClassifierBias]);
  };
  const double p = c.token_head_dropout();
  if (c.family == ModelFamily::kModernBert) {  // final_norm (the model's), head, drop, classifier
    const at::Tensor normed = layer_norm(hidden, w[Slot::kFinalNormWeight], w[Slot::kFinalNormBias], c.layer_norm_eps);
    const at::Tensor dense = at::linear(normed, w[Slot::kHeadDenseWeight], w[Slot::kHeadDenseBias]);
    const at::Tensor head = layer_norm(apply_activation(c.classifier_activation, dense), w[Slot::kHeadNormWeight],
                                       w[Slot::kHeadNormBias], c.layer_norm_eps);
    return classify(shardtrain::dropout(head, p, training));
  }
  // Every other family: dropout, then the classifier (qa_outputs) on each token.
  return classify(p > 0 ? shardtrain::dropout(hidden, p, training) : hidden);
}

}  // namespace shardtrain::detail

namespace shardtrain {

double EncoderConfig::token_head_dropout() const {
  // <Family>ForQuestionAnswering: qa_outputs straight on the hidden states
  // (BERT, RoBERTa, ELECTRA, DeBERTa-v2), after dropout (qa_dropout) for
  // DistilBERT; ModernBERT's is its token head.
  if (task == Task::kQuestionAnswering && family != ModelFamily::kModernBert)
    return family == ModelFamily::kDistilBert ? qa_dropout : 0.0;
  switch (family) {
    case ModelFamily::kDistilBert:  // dropout (config.dropout), classifier
    case ModelFamily::kDebertaV2:   // dropout (hidden_dropout_prob), classifier
      return hidden_dropout_prob;
    default:  // BERT, RoBERTa, ELECTRA, ModernBERT: classifier_dropout, else hidden_dropout_prob
      return effective_classifier_dropout();
  }
}

}  // namespace shardtrain::detail
