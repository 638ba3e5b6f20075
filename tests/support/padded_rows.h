// A batch of rows of the given lengths, right-padded to the longest, with
// random ids (pad_token_id in the padding), token types 0 and random labels,
// drawn after at::manual_seed(seed). For tests of padded against packed
// (unpadded) forwards, where sequences of different lengths share a batch.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "shardtrain/data/collator.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/model/encoder_config.h"

namespace shardtrain_test {

inline shardtrain::Batch padded_rows(const shardtrain::EncoderConfig& c, const std::vector<int64_t>& lengths,
                                     uint64_t seed) {
  at::manual_seed(seed);
  int64_t L = 0;
  for (int64_t n : lengths) L = std::max(L, n);
  const int64_t B = static_cast<int64_t>(lengths.size());
  shardtrain::Batch b;
  b.attention_mask = at::zeros({B, L}, at::kLong);
  for (int64_t r = 0; r < B; ++r) b.attention_mask[r].narrow(0, 0, lengths[r]).fill_(1);
  b.input_ids = at::randint(3, c.vocab_size, {B, L}, at::kLong).masked_fill(b.attention_mask == 0, c.pad_token_id);
  b.token_type_ids = at::zeros({B, L}, at::kLong);
  b.labels = at::randint(0, c.num_labels, {B}, at::kLong);
  b.num_real_tokens = b.attention_mask.sum().item<int64_t>();
  b.num_total_tokens = B * L;
  return b;
}

// A training step's logits and every parameter's gradient, and the largest
// absolute difference between two of them (tests that compare two ways of
// computing the same step).
struct StepOutputs {
  at::Tensor logits;
  std::vector<at::Tensor> grads;
};

// One training step of `model` on `batch` from the generator state of
// at::manual_seed(77), so two calls draw the same dropout masks: logits and
// gradients in float64.
inline StepOutputs training_step(shardtrain::TaskModel& model, const shardtrain::Batch& batch) {
  model.zero_grad();
  at::manual_seed(77);
  const at::Tensor logits = model.forward_batch(batch);
  model.loss(logits, batch.labels).backward();
  StepOutputs s{logits.detach().to(at::kDouble), {}};
  for (const at::Tensor& p : model.parameters()) s.grads.push_back(p.grad().to(at::kDouble));
  return s;
}

// Largest |a - b| - tol (1 + |b|) over logits and gradients: <= 0 passes.
inline double excess_over(const StepOutputs& a, const StepOutputs& b, double tol) {
  auto one = [tol](const at::Tensor& x, const at::Tensor& y) {
    return ((x - y).abs() - tol * (1 + y.abs())).max().item<double>();
  };
  double worst = one(a.logits, b.logits);
  for (size_t i = 0; i < a.grads.size(); ++i) worst = std::max(worst, one(a.grads[i], b.grads[i]));
  return worst;
}

inline double largest_difference(const StepOutputs& a, const StepOutputs& b) {
  double worst = (a.logits - b.logits).abs().max().item<double>();
  for (size_t i = 0; i < a.grads.size(); ++i)
    worst = std::max(worst, (a.grads[i] - b.grads[i]).abs().max().item<double>());
  return worst;
}

}  // namespace shardtrain_test
