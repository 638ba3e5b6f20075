// Collation: a list of example indices -> the model's input tensors.
//
// Shapes (B = examples in the batch, L = longest sequence among them):
//   input_ids       [B, L] int64, padded with the tokenizer's pad id
//   token_type_ids  [B, L] int64, padded with 0
//   attention_mask  [B, L] int64, 1 for real tokens, 0 for padding
//   labels          [B]    int64 class ids, or float32 for regression;
//                   [B, L] int64 token labels (token classification; -100 at
//                          padding and at tokens without a label);
//                   [B, 2] int64 answer start and end tokens (extractive QA);
//                          undefined when the dataset has no labels
// Multiple choice: an example is num_choices sequences (data/dataset.h), and
// a batch of B examples has B x num_choices rows, example b's choices at rows
// [b * num_choices, (b+1) * num_choices); labels [B] are the right choices.
// Padding is dynamic (to the longest row of this batch, as HF's
// DataCollatorWithPadding does). Length bucketing, which makes batches of
// similar lengths, lives in the sampler (SamplerOptions::bucket_window_batches)
// so that it acts on global batches and keeps the world-size invariance.
//
//   Batch batch = collate(dataset, indices, tokenizer.pad_id());
//   stats.add(batch);   // ... at the end of the epoch: stats.padding_fraction()
//
// Packed (unpadded) batches, for TaskModel::forward_packed
// (model/task_model.h), as MosaicBERT's and NVIDIA's fine-tuning kernels take them:
// the B rows' real tokens back to back, T = sum of their lengths, no padding.
//   input_ids       [T]    int64
//   token_type_ids  [T]    int64
//   position_ids    [T]    int64, 0..n_b-1 within each row
//   cu_seqlens      [B+1]  int64, row b is tokens [cu_seqlens[b], cu_seqlens[b+1])
//   max_seqlen             the longest row (the padded layout's L)
//   labels          [B]    as above ([T] for token labels, [B, 2] for spans)
//
//   PackedBatch packed = collate_packed(dataset, indices);
//   at::Tensor logits = model->forward_packed(packed.input_ids, packed.token_type_ids,
//                                             packed.position_ids, packed.cu_seqlens, packed.max_seqlen);
#pragma once

#include <mpi.h>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <cstdint>
#include <vector>

#include "shardtrain/data/dataset.h"

namespace shardtrain {

struct Batch {
  at::Tensor input_ids;       // [B, L] int64
  at::Tensor token_type_ids;  // [B, L] int64
  at::Tensor attention_mask;  // [B, L] int64
  at::Tensor labels;          // [B] int64 / float32, [B, L] or [B, 2] int64 (above), or undefined
  int64_t num_choices = 1;    // sequences per example (multiple choice)
  int64_t num_real_tokens = 0;
  int64_t num_total_tokens = 0;  // rows * L

  // Rows (sequences) in the batch.
  int64_t size() const { return input_ids.defined() ? input_ids.size(0) : 0; }
  // Examples in the batch: rows / num_choices.
  int64_t num_examples() const { return size() / num_choices; }
};

// Builds the batch for `indices` (rows of `dataset`, in that order; repeats
// allowed). Throws Error for an empty index list or an index out of range.
Batch collate(const TokenizedDataset& dataset, const std::vector<int64_t>& indices, int32_t pad_id);

// The batch's tensors on `device` (the batch itself when it is the CPU).
Batch to_device(Batch batch, const at::Device& device);

struct PackedBatch {
  at::Tensor input_ids;       // [T] int64
  at::Tensor token_type_ids;  // [T] int64
  at::Tensor position_ids;    // [T] int64
  at::Tensor cu_seqlens;      // [B+1] int64
  int64_t max_seqlen = 0;
  at::Tensor labels;          // [B] int64 / float32, [T] token labels, [B, 2] spans, or undefined
  int64_t num_choices = 1;    // as Batch::num_choices
  int64_t num_real_tokens = 0;   // T
  int64_t num_total_tokens = 0;  // B * max_seqlen: what the padded batch holds

  int64_t size() const { return cu_seqlens.defined() ? cu_seqlens.size(0) - 1 : 0; }
  // The tensors moved to `device` (a copy of the struct; cu_seqlens too).
  PackedBatch to(const c10::Device& device) const;
};

// The packed batch of the same rows (same order, same labels) as collate().
// Throws Error for an empty index list or an index out of range.
PackedBatch collate_packed(const TokenizedDataset& dataset, const std::vector<int64_t>& indices);

// A padded batch packed: each attention_mask row must be ones then zeros (as
// collate() writes it), with at least one real token; an undefined mask means
// every token is real. Throws Error otherwise.
PackedBatch pack_batch(const Batch& batch);

// Padding accounting over many batches (e.g. one epoch on one rank; sum the two
// counters over ranks for the job-wide figure).
struct PaddingStats {
  int64_t real_tokens = 0;
  int64_t total_tokens = 0;

  void add(const Batch& batch) {
    real_tokens += batch.num_real_tokens;
    total_tokens += batch.num_total_tokens;
  }
  // A packed batch counts what its padded form would hold (the attention
  // matmuls still run on B x max_seqlen).
  void add(const PackedBatch& batch) {
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
