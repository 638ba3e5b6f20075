#include "shardtrain/data/collator.h"

#include <torch/torch.h>

#include <algorithm>

#include "shardtrain/comm/watchdog.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain {

Batch collate(const TokenizedDataset& dataset, const std::vector<int64_t>& indices, int32_t pad_id) {
  if (indices.empty()) throw Error("collate: empty batch");
  const int64_t batch_size = static_cast<int64_t>(indices.size());
  int64_t max_length = 0, real_tokens = 0;
  for (int64_t index : indices) {
    if (index < 0 || index >= dataset.size())
      throw Error(str_format("collate: example %lld outside a dataset of %lld", static_cast<long long>(index),
                             static_cast<long long>(dataset.size())));
    max_length = std::max(max_length, dataset.length(index));
    real_tokens += dataset.length(index);
  }

  // Filled on the host through raw pointers: one pass, no per-row tensor ops.
  Batch batch;
  batch.input_ids = torch::full({batch_size, max_length}, static_cast<int64_t>(pad_id), torch::kInt64);
  batch.token_type_ids = torch::zeros({batch_size, max_length}, torch::kInt64);
  batch.attention_mask = torch::zeros({batch_size, max_length}, torch::kInt64);
  int64_t* ids = batch.input_ids.data_ptr<int64_t>();
  int64_t* types = batch.token_type_ids.data_ptr<int64_t>();
  int64_t* mask = batch.attention_mask.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch_size; ++b) {
    const int64_t row = indices[b], length = dataset.length(row);
    const int32_t* row_ids = dataset.ids(row);
    const uint8_t* row_types = dataset.types(row);
    for (int64_t t = 0; t < length; ++t) {
      ids[b * max_length + t] = row_ids[t];
      types[b * max_length + t] = row_types[t];
      mask[b * max_length + t] = 1;
    }
  }

  const Labels& labels = dataset.labels;
  if (labels.kind == LabelKind::kClass) {
    batch.labels = torch::empty({batch_size}, torch::kInt64);
    int64_t* out = batch.labels.data_ptr<int64_t>();
    for (int64_t b = 0; b < batch_size; ++b) out[b] = labels.class_ids[indices[b]];
  } else if (labels.kind == LabelKind::kRegression) {
    batch.labels = torch::empty({batch_size}, torch::kFloat32);
    float* out = batch.labels.data_ptr<float>();
    for (int64_t b = 0; b < batch_size; ++b) out[b] = labels.values[indices[b]];
  }
  batch.num_real_tokens = real_tokens;
  batch.num_total_tokens = batch_size * max_length;
  return batch;
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
