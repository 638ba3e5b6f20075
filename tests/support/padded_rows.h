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

inline double largest_difference(const StepOutputs& a, const StepOutputs& b) {
  double worst = (a.logits - b.logits).abs().max().item<double>();
  for (size_t i = 0; i < a.grads.size(); ++i)
    worst = std::max(worst, (a.grads[i] - b.grads[i]).abs().max().item<double>());
  return worst;
}

}  // namespace shardtrain_test
