// Collation: a list of example indices -> the model's input tensors.
//
// Shapes (B = examples in the batch, L = longest sequence among them):
//   input_ids       [B, L] int64, padded with the tokenizer's pad id
//   token_type_ids  [B, L] int64, padded with 0
//   attention_mask  [B, L] int64, 1 for real tokens, 0 for padding
//   labels          [B]    int64 class ids, or float32 for regression;
//                          undefined when the dataset has no labels
// Padding is dynamic (to the longest row of this batch, as HF's
// DataCollatorWithPadding does). Length bucketing, which makes batches of
// similar lengths, lives in the sampler (SamplerOptions::bucket_window_batches)
// so that it acts on global batches and keeps the world-size invariance.
//
//   Batch batch = collate(dataset, indices, tokenizer.pad_id());
//   stats.add(batch);   // ... at the end of the epoch: stats.padding_fraction()
#pragma once

#include <mpi.h>

#include <ATen/core/Tensor.h>
#include <cstdint>
#include <vector>

#include "shardtrain/data/dataset.h"

namespace shardtrain {

struct Batch {
  at::Tensor input_ids;       // [B, L] int64
  at::Tensor token_type_ids;  // [B, L] int64
  at::Tensor attention_mask;  // [B, L] int64
  at::Tensor labels;          // [B] int64 / float32, or undefined
  int64_t num_real_tokens = 0;
  int64_t num_total_tokens = 0;  // B * L

  int64_t size() const { return input_ids.defined() ? input_ids.size(0) : 0; }
};

// Builds the batch for `indices` (rows of `dataset`, in that order; repeats
// allowed). Throws Error for an empty index list or an index out of range.
Batch collate(const TokenizedDataset& dataset, const std::vector<int64_t>& indices, int32_t pad_id);

// The batch's tensors on `device` (the batch itself when it is the CPU).
Batch to_device(Batch batch, const at::Device& device);

// Padding accounting over many batches (e.g. one epoch on one rank; sum the two
// counters over ranks for the job-wide figure).
struct PaddingStats {
  int64_t real_tokens = 0;
  int64_t total_tokens = 0;

  void add(const Batch& batch) {
    real_tokens += batch.num_real_tokens;
    total_tokens += batch.num_total_tokens;
  }
  // Pad tokens / all tokens; 0 when nothing was added.
  double padding_fraction() const {
    return total_tokens == 0 ? 0.0 : static_cast<double>(total_tokens - real_tokens) / total_tokens;
  }
  // The job-wide counts: both counters summed over `comm` (collective).
  PaddingStats sum_over_ranks(MPI_Comm comm) const;
};

}  // namespace shardtrain
