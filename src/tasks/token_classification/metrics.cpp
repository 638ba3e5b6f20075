// Token classification's records, metrics and baseline
// (tasks/token_classification.h).
#include <ATen/ATen.h>

#include <algorithm>

#include "shardtrain/core/check.h"
#include "shardtrain/metrics/entity_metrics.h"
#include "shardtrain/tasks/token_classification.h"

namespace shardtrain {

int64_t token_record_positions(const TokenizedDataset& data) {
  int64_t longest = 0;
  for (int64_t s = 0; s < data.num_sequences(); ++s) longest = std::max(longest, data.sequence_length(s));
  return longest;
}

RecordFn token_record(int64_t positions) {
  return [positions](const at::Tensor& logits, const Batch& batch) {
    // logits [B, L, C], labels [B, L] (-100 at padding and unlabelled tokens).
    const int64_t B = logits.size(0), L = logits.size(1);
    at::Tensor out = at::full({B, positions + 2}, -1.0f, at::kFloat);
    out.narrow(1, 0, L).copy_(logits.argmax(-1).to(at::kFloat));
    const at::Tensor labels = batch.labels.to(logits.device());
    const at::Tensor losses = at::cross_entropy_loss(logits.to(at::kFloat).reshape({-1, logits.size(-1)}),
                                                     labels.reshape({-1}), {}, at::Reduction::None)
                                  .view({B, L}).to(at::kDouble);
    const at::Tensor counted = labels.ne(kIgnoreLabel);
    out.select(1, positions).copy_(losses.sum(1));
    out.select(1, positions + 1).copy_(counted.sum(1));
    return out;
  };
}

std::map<std::string, double> token_metrics(const std::vector<float>& records, int64_t positions,
                                            const TokenizedDataset& data, const std::vector<std::string>& tag_names) {
  const int64_t width = positions + 2;
  ST_ASSERT(static_cast<int64_t>(records.size()) == data.size() * width, "token_metrics: records and data differ");
  std::vector<std::vector<std::string>> references, predictions;
  double loss = 0, count = 0;
  auto name = [&](int64_t id) -> const std::string& {
    ST_ASSERT(id >= 0 && id < static_cast<int64_t>(tag_names.size()), "token_metrics: a tag id without a name");
    return tag_names[static_cast<size_t>(id)];
  };
  for (int64_t e = 0; e < data.size(); ++e) {
    const float* record = records.data() + e * width;
    std::vector<std::string> ref, pred;
    for (int32_t p : labelled_positions(data, e)) {
      ref.push_back(name(data.token_labels[static_cast<size_t>(data.offsets[e] + p)]));
      pred.push_back(name(static_cast<int64_t>(record[p])));
    }
    references.push_back(std::move(ref));
    predictions.push_back(std::move(pred));
    loss += record[positions];
    count += record[positions + 1];
  }
  const EntityMetrics m = entity_metrics(references, predictions);
  std::map<std::string, double> out;
  out["eval_loss"] = count > 0 ? loss / count : 0.0;
  out["eval_precision"] = m.precision;
  out["eval_recall"] = m.recall;
  out["eval_f1"] = m.f1;
  out["eval_accuracy"] = m.accuracy;
  for (const auto& [type, scores] : m.per_type) out["eval_" + type + "_f1"] = scores.f1;
  return out;
}

Baseline outside_baseline(const TokenizedDataset& train, const TokenizedDataset& eval,
                          const std::vector<std::string>& tag_names) {
  Baseline b;
  const auto outside = std::find(tag_names.begin(), tag_names.end(), "O");
  if (outside != tag_names.end()) {
    b.class_id = outside - tag_names.begin();
    b.name = "every word O";
  } else {
    std::vector<int64_t> counts(tag_names.size(), 0);
    for (int32_t label : train.token_labels)
      if (label != kIgnoreLabel) ++counts[static_cast<size_t>(label)];
    b.class_id = std::max_element(counts.begin(), counts.end()) - counts.begin();
    b.name = "every word " + tag_names[static_cast<size_t>(b.class_id)];
  }
  const int64_t positions = token_record_positions(eval);
  std::vector<float> records(static_cast<size_t>(eval.size() * (positions + 2)), static_cast<float>(b.class_id));
  b.metrics = token_metrics(records, positions, eval, tag_names);
  b.metrics.erase("eval_loss");
  return b;
}

}  // namespace shardtrain
