// Each family's classification head on the pooled [B, D] input
// (docs/DESIGN.md, "Model families"); transformers' names in comments.
#include <ATen/ATen.h>

#include "model/encoder.h"
#include "shardtrain/model/classifier.h"
#include "shardtrain/model/dropout.h"

namespace shardtrain::detail {

at::Tensor classifier_head(const EncoderConfig& c, const UnitWeights& w, const at::Tensor& pooled, bool training) {
  const double p = c.effective_classifier_dropout();
  auto dense = [&](const at::Tensor& x) { return at::linear(x, w[Slot::kHeadDenseWeight], w[Slot::kHeadDenseBias]); };
  auto classify = [&](const at::Tensor& x) {
    return at::linear(x, w[Slot::kClassifierWeight], w[Slot::kClassifierBias]);
  };
  switch (c.family) {
    case ModelFamily::kBert:  // BertPooler (tanh), dropout, classifier
      return classify(shardtrain::dropout(at::tanh(dense(pooled)), p, training));
    case ModelFamily::kRoberta:  // RobertaClassificationHead: dropout, dense, tanh, dropout, out_proj
      return classify(shardtrain::dropout(at::tanh(dense(shardtrain::dropout(pooled, p, training))), p, training));
    case ModelFamily::kElectra:  // ElectraClassificationHead: the same with GELU
      return classify(shardtrain::dropout(at::gelu(dense(shardtrain::dropout(pooled, p, training))), p, training));
    case ModelFamily::kDistilBert:  // pre_classifier, ReLU, dropout (seq_classif_dropout), classifier
      return classify(shardtrain::dropout(at::relu(dense(pooled)), p, training));
    case ModelFamily::kModernBert: {  // ModernBertPredictionHead: norm(act(dense)); drop; classifier
      const at::Tensor head = layer_norm(apply_activation(c.classifier_activation, dense(pooled)),
                                         w[Slot::kHeadNormWeight], w[Slot::kHeadNormBias], c.layer_norm_eps);
      return classify(shardtrain::dropout(head, p, training));
    }
    case ModelFamily::kDebertaV2: {  // ContextPooler (dropout, dense, act), dropout (cls_dropout), classifier
      const at::Tensor pooled_dense = dense(shardtrain::dropout(pooled, c.pooler_dropout, training));
      return classify(shardtrain::dropout(apply_activation(c.pooler_hidden_act, pooled_dense), p, training));
    }
  }
  return {};
}

}  // namespace shardtrain::detail
