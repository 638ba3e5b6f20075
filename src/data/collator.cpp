#include "shardtrain/data/collator.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "shardtrain/comm/watchdog.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain {
namespace {

// Checks the example indices; returns the sequences they hold, in order
// (an example of k sequences gives k consecutive ones).
std::vector<int64_t> sequences_of(const TokenizedDataset& dataset, const std::vector<int64_t>& indices,
                                  const char* who) {
  if (indices.empty()) throw Error(std::string(who) + ": empty batch");
  const int64_t k = dataset.sequences_per_example;
  std::vector<int64_t> sequences;
  sequences.reserve(indices.size() * static_cast<size_t>(k));
  for (int64_t index : indices) {
    if (index < 0 || index >= dataset.size())
      throw Error(str_format("%s: example %lld outside a dataset of %lld", who, static_cast<long long>(index),
                             static_cast<long long>(dataset.size())));
    for (int64_t c = 0; c < k; ++c) sequences.push_back(index * k + c);
  }
  return sequences;
}

// (longest sequence, total real tokens) of `sequences`.
std::pair<int64_t, int64_t> measure(const TokenizedDataset& dataset, const std::vector<int64_t>& sequences) {
  int64_t max_length = 0, real_tokens = 0;
  for (int64_t s : sequences) {
    max_length = std::max(max_length, dataset.sequence_length(s));
    real_tokens += dataset.sequence_length(s);
  }
  return {max_length, real_tokens};
}

// The examples' labels: [B] class ids or values; [S, 2] answer spans (one per
// sequence); or undefined when the dataset has none. Token labels are not
// here (collate pads them, collate_packed packs them).
at::Tensor collate_labels(const TokenizedDataset& dataset, const std::vector<int64_t>& indices,
                          const std::vector<int64_t>& sequences) {
  const int64_t batch_size = static_cast<int64_t>(indices.size());
  const Labels& labels = dataset.labels;
  at::Tensor out;
  if (!dataset.span_labels.empty()) {
    out = at::empty({static_cast<int64_t>(sequences.size()), 2}, at::kLong);
    int64_t* values = out.data_ptr<int64_t>();
    for (size_t i = 0; i < sequences.size(); ++i)
      for (int j = 0; j < 2; ++j) values[2 * i + j] = dataset.span_labels[2 * sequences[i] + j];
  } else if (labels.kind == LabelKind::kClass) {
    out = at::empty({batch_size}, at::kLong);
    int64_t* values = out.data_ptr<int64_t>();
    for (int64_t b = 0; b < batch_size; ++b) values[b] = labels.class_ids[indices[b]];
  } else if (labels.kind == LabelKind::kRegression) {
    out = at::empty({batch_size}, at::kFloat);
    float* values = out.data_ptr<float>();
    for (int64_t b = 0; b < batch_size; ++b) values[b] = labels.values[indices[b]];
  }
  return out;
}

}  // namespace

Batch collate(const TokenizedDataset& dataset, const std::vector<int64_t>& indices, int32_t pad_id) {
  const std::vector<int64_t> sequences = sequences_of(dataset, indices, "collate");
  const int64_t rows = static_cast<int64_t>(sequences.size());
  const auto [max_length, real_tokens] = measure(dataset, sequences);
  const bool token_labels = !dataset.token_labels.empty();

  // Filled on the host through raw pointers: one pass, no per-row tensor ops.
  Batch batch;
  batch.input_ids = at::full({rows, max_length}, static_cast<int64_t>(pad_id), at::kLong);
  batch.token_type_ids = at::zeros({rows, max_length}, at::kLong);
  batch.attention_mask = at::zeros({rows, max_length}, at::kLong);
  if (token_labels) batch.labels = at::full({rows, max_length}, static_cast<int64_t>(kIgnoreLabel), at::kLong);
  int64_t* ids = batch.input_ids.data_ptr<int64_t>();
  int64_t* types = batch.token_type_ids.data_ptr<int64_t>();
  int64_t* mask = batch.attention_mask.data_ptr<int64_t>();
  int64_t* tags = token_labels ? batch.labels.data_ptr<int64_t>() : nullptr;
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t s = sequences[b], length = dataset.sequence_length(s);
    const int32_t* row_ids = dataset.ids(s);
    const uint8_t* row_types = dataset.types(s);
    const int32_t* row_tags = token_labels ? dataset.token_labels.data() + dataset.offsets[s] : nullptr;
    for (int64_t t = 0; t < length; ++t) {
      ids[b * max_length + t] = row_ids[t];
      types[b * max_length + t] = row_types[t];
      mask[b * max_length + t] = 1;
      if (tags) tags[b * max_length + t] = row_tags[t];
    }
  }

  if (!token_labels) batch.labels = collate_labels(dataset, indices, sequences);
  batch.num_choices = dataset.sequences_per_example;
  batch.num_real_tokens = real_tokens;
  batch.num_total_tokens = rows * max_length;
  return batch;
}

PackedBatch collate_packed(const TokenizedDataset& dataset, const std::vector<int64_t>& indices) {
  const std::vector<int64_t> sequences = sequences_of(dataset, indices, "collate_packed");
  const int64_t rows = static_cast<int64_t>(sequences.size());
  const auto [max_length, real_tokens] = measure(dataset, sequences);
  const bool token_labels = !dataset.token_labels.empty();
  PackedBatch batch;
  batch.input_ids = at::empty({real_tokens}, at::kLong);
  batch.token_type_ids = at::empty({real_tokens}, at::kLong);
  batch.position_ids = at::empty({real_tokens}, at::kLong);
  batch.cu_seqlens = at::empty({rows + 1}, at::kLong);
  if (token_labels) batch.labels = at::empty({real_tokens}, at::kLong);
  int64_t* ids = batch.input_ids.data_ptr<int64_t>();
  int64_t* types = batch.token_type_ids.data_ptr<int64_t>();
  int64_t* positions = batch.position_ids.data_ptr<int64_t>();
  int64_t* cu = batch.cu_seqlens.data_ptr<int64_t>();
  int64_t* tags = token_labels ? batch.labels.data_ptr<int64_t>() : nullptr;
  int64_t t = 0;
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t s = sequences[b], length = dataset.sequence_length(s);
    const int32_t* row_ids = dataset.ids(s);
    const uint8_t* row_types = dataset.types(s);
    cu[b] = t;
    for (int64_t p = 0; p < length; ++p, ++t) {
      ids[t] = row_ids[p];
      types[t] = row_types[p];
      positions[t] = p;
      if (tags) tags[t] = dataset.token_labels[dataset.offsets[s] + p];
    }
  }
  cu[rows] = t;
  batch.max_seqlen = max_length;
  if (!token_labels) batch.labels = collate_labels(dataset, indices, sequences);
  batch.num_choices = dataset.sequences_per_example;
  batch.num_real_tokens = real_tokens;
  batch.num_total_tokens = rows * max_length;
  return batch;
}

PackedBatch pack_batch(const Batch& padded) {
  if (padded.size() == 0) throw Error("pack_batch: empty batch");
  if (padded.input_ids.dim() != 2) throw Error("pack_batch: input_ids must be [B, L]");
  for (const at::Tensor* t : {&padded.attention_mask, &padded.token_type_ids})
    if (t->defined() && t->sizes() != padded.input_ids.sizes())
      throw Error("pack_batch: attention_mask and token_type_ids must have input_ids' shape [B, L]");
  const at::Tensor ids = padded.input_ids.to(at::kCPU).contiguous();
  // No mask: every token is real (as forward() reads it).
  const at::Tensor mask = padded.attention_mask.defined()
                              ? padded.attention_mask.to(at::kCPU, at::kLong).contiguous()
                              : at::ones_like(ids, at::kLong);
  const at::Tensor types = padded.token_type_ids.defined() ? padded.token_type_ids.to(at::kCPU).contiguous()
                                                           : at::zeros_like(ids);
  const int64_t batch_size = ids.size(0), width = ids.size(1);
  const int64_t* m = mask.data_ptr<int64_t>();
  std::vector<int64_t> lengths(static_cast<size_t>(batch_size));
  for (int64_t b = 0; b < batch_size; ++b) {
    int64_t n = 0;
    while (n < width && m[b * width + n] != 0) ++n;
    for (int64_t p = n; p < width; ++p)
      if (m[b * width + p] != 0)
        throw Error(str_format("pack_batch: attention_mask row %lld has a real token after padding (position %lld); "
                               "only right-padded rows can be packed",
                               static_cast<long long>(b), static_cast<long long>(p)));
    if (n == 0) throw Error(str_format("pack_batch: attention_mask row %lld is all padding", static_cast<long long>(b)));
    lengths[b] = n;
  }
  PackedBatch batch;
  std::vector<int64_t> cu(static_cast<size_t>(batch_size) + 1, 0), positions, rows;
  for (int64_t b = 0; b < batch_size; ++b) {
    cu[b + 1] = cu[b] + lengths[b];
    for (int64_t p = 0; p < lengths[b]; ++p) {
      positions.push_back(p);
      rows.push_back(b * width + p);
    }
    batch.max_seqlen = std::max(batch.max_seqlen, lengths[b]);
  }
  const at::Tensor flat_rows = at::tensor(rows, at::kLong);
  batch.input_ids = ids.view({-1}).index_select(0, flat_rows).to(at::kLong);
  batch.token_type_ids = types.view({-1}).index_select(0, flat_rows).to(at::kLong);
  batch.position_ids = at::tensor(positions, at::kLong);
  batch.cu_seqlens = at::tensor(cu, at::kLong);
  // Token labels [B, L] are packed like the ids; per-example labels stay as they are.
  if (padded.labels.defined() && padded.labels.dim() == 2 && padded.labels.sizes() == padded.input_ids.sizes())
    batch.labels = padded.labels.to(at::kCPU).contiguous().view({-1}).index_select(0, flat_rows);
  else
    batch.labels = padded.labels.defined() ? padded.labels.to(at::kCPU) : at::Tensor();
  batch.num_choices = padded.num_choices;
  batch.num_real_tokens = cu.back();
  batch.num_total_tokens = batch_size * batch.max_seqlen;
  return batch;
}

PackedBatch PackedBatch::to(const c10::Device& device) const {
  PackedBatch out = *this;
  for (at::Tensor* t : {&out.input_ids, &out.token_type_ids, &out.position_ids, &out.cu_seqlens, &out.labels})
    if (t->defined()) *t = t->to(device);
  return out;
}

PaddingStats PaddingStats::sum_over_ranks(MPI_Comm comm) const {
  int64_t local[2] = {real_tokens, total_tokens}, global[2] = {real_tokens, total_tokens};
  if (comm != MPI_COMM_NULL) {
    PhaseGuard guard(comm, "padding statistics (PaddingStats::sum_over_ranks)");
    ST_CHECK_MPI(MPI_Allreduce(local, global, 2, MPI_INT64_T, MPI_SUM, comm));
  }
  PaddingStats result;
  result.real_tokens = global[0];
  result.total_tokens = global[1];
  return result;
}

Batch to_device(Batch batch, const at::Device& device) {
  if (device.is_cpu()) return batch;
  batch.input_ids = batch.input_ids.to(device);
  batch.token_type_ids = batch.token_type_ids.to(device);
  batch.attention_mask = batch.attention_mask.to(device);
  if (batch.labels.defined()) batch.labels = batch.labels.to(device);
  return batch;
}

}  // namespace shardtrain
