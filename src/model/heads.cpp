// The heads, as the family's recipes say (model/family_spec.h,
// PooledHeadRecipe and TokenHeadRecipe; docs/DESIGN.md, "Model families" and
// "Tasks").
#include <ATen/ATen.h>

#include "model/encoder.h"
#include "shardtrain/model/dropout.h"
#include "shardtrain/model/family_spec.h"
#include "shardtrain/model/task_model.h"

namespace shardtrain::detail {

at::Tensor classifier_head(const EncoderConfig& c, const PooledHeadRecipe& head, const UnitWeights& w,
                           const at::Tensor& pooled, bool training) {
  const at::Tensor dense = linear_at(w, Slot::kHeadDenseWeight, shardtrain::dropout(pooled, head.dropout_in, training),
                                     training);
  at::Tensor x = apply_activation(head.activation, dense);
  if (head.norm) x = layer_norm(x, w[Slot::kHeadNormWeight], w[Slot::kHeadNormBias], c.layer_norm_eps);
  return linear_at(w, Slot::kClassifierWeight, shardtrain::dropout(x, head.dropout_out, training), training);
}

at::Tensor token_head(const EncoderConfig& c, const TokenHeadRecipe& head, const UnitWeights& w,
                      const at::Tensor& hidden, bool training) {
  at::Tensor x = hidden;
  if (head.final_norm)  // the model's (ModernBERT's final_norm, EuroBERT's model.norm)
    x = norm(head.final_norm_kind, x, w[Slot::kFinalNormWeight], w[Slot::kFinalNormBias], c.layer_norm_eps);
  if (head.prediction_head) {  // head.dense, activation, head.norm
    const at::Tensor dense = linear_at(w, Slot::kHeadDenseWeight, x, training);
    x = layer_norm(apply_activation(head.activation, dense), w[Slot::kHeadNormWeight], w[Slot::kHeadNormBias],
                   c.layer_norm_eps);
  }
  return linear_at(w, Slot::kClassifierWeight, shardtrain::dropout(x, head.dropout, training), training);
}

}  // namespace shardtrain::detail
