#include "shardtrain/train/evaluate.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "shardtrain/core/check.h"
#include "shardtrain/data/task_datasets.h"
#include "shardtrain/train/entity_metrics.h"
#include "shardtrain/core/log.h"
#include "shardtrain/data/collator.h"
#include "shardtrain/data/sampler.h"
#include "shardtrain/model/classifier.h"
#include "shardtrain/train/metrics.h"

namespace shardtrain {

std::vector<float> sharded_records(SequenceClassifier& model, const TokenizedDataset& data, int64_t batch_size,
                                   int32_t pad_id, const at::Device& device, MPI_Comm comm, int64_t width,
                                   const RecordFn& record, std::vector<int64_t>* rows) {
  int rank = 0, world = 1;
  ST_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  ST_CHECK_MPI(MPI_Comm_size(comm, &world));
  const EvalPlan plan = make_eval_plan(data.size(), batch_size, world);
  std::vector<float> local;
  std::vector<int64_t> local_rows;
  local.reserve(static_cast<size_t>(plan.per_rank_count() * width));
  const bool was_training = model.is_training();
  model.eval();
  {
    at::NoGradGuard no_grad;
    for (int64_t k = 0; k < plan.num_batches; ++k) {
      const std::vector<int64_t> indices = eval_batch(plan, rank, k);
      const Batch batch = to_device(collate(data, indices, pad_id), device);
      const at::Tensor values = record(model.forward_batch(batch), batch).to(at::kCPU, at::kFloat).contiguous();
      ST_ASSERT(values.dim() == 2 && values.size(0) == static_cast<int64_t>(indices.size()) && values.size(1) == width,
                "sharded_records: unexpected record shape");
      local.insert(local.end(), values.data_ptr<float>(), values.data_ptr<float>() + values.numel());
      local_rows.insert(local_rows.end(), indices.begin(), indices.end());
    }
  }
  model.train(was_training);
  if (rows) *rows = gather_for_metrics(local_rows, plan, comm, 1);
  return gather_for_metrics(local, plan, comm, width);
}

std::vector<float> sharded_logits(SequenceClassifier& model, const TokenizedDataset& data,
                                  int64_t batch_size, int32_t pad_id, const at::Device& device, MPI_Comm comm,
                                  std::vector<int64_t>* rows) {
  const int64_t width = model.config().task == Task::kMultipleChoice ? data.sequences_per_example
                                                                     : model.config().num_labels;
  return sharded_records(model, data, batch_size, pad_id, device, comm, width,
                         [](const at::Tensor& logits, const Batch&) { return logits; }, rows);
}

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

std::map<std::string, double> choice_metrics(const std::vector<float>& logits, const TokenizedDataset& data) {
  const int64_t k = data.sequences_per_example;
  Labels labels = data.labels;
  return eval_metrics(logits, labels, k, /*with_class_metrics=*/false);
}

std::map<std::string, double> evaluate_task(SequenceClassifier& model, const TokenizedDataset& data,
                                            int64_t batch_size, int32_t pad_id, const at::Device& device,
                                            MPI_Comm comm, const std::vector<std::string>& tag_names) {
  const EncoderConfig& config = model.config();
  switch (config.task) {
    case Task::kTokenClassification: {
      const int64_t positions = token_record_positions(data);
      return token_metrics(sharded_records(model, data, batch_size, pad_id, device, comm, positions + 2,
                                           token_record(positions)),
                           positions, data, tag_names);
    }
    case Task::kMultipleChoice:
      return choice_metrics(sharded_logits(model, data, batch_size, pad_id, device, comm), data);
    case Task::kSequenceClassification: break;
  }
  return eval_metrics(sharded_logits(model, data, batch_size, pad_id, device, comm), data.labels, config.num_labels);
}

std::map<std::string, double> eval_metrics(const std::vector<float>& logits, const Labels& labels, int64_t num_labels,
                                           bool with_class_metrics) {
  std::map<std::string, double> m;
  if (num_labels == 1) {
    const RegressionMetrics r = regression_metrics(std::vector<float>(logits.begin(), logits.end()), labels.values);
    m["eval_loss"] = r.mse;
    m["eval_mse"] = r.mse;
    m["eval_pearson"] = r.pearson;
    return m;
  }
  const std::vector<int64_t>& y = labels.class_ids;
  const int64_t n = static_cast<int64_t>(y.size());
  const int64_t c = num_labels;
  ST_ASSERT(static_cast<int64_t>(logits.size()) == n * c, "eval_metrics: logits and labels differ in rows");
  std::vector<int64_t> predicted(n);
  double loss = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* row = logits.data() + i * c;
    predicted[i] = std::max_element(row, row + c) - row;  // first maximum, like torch.argmax
    // Cross-entropy in float64: logsumexp(row) - row[label].
    double mx = row[0];
    for (int64_t j = 1; j < c; ++j) mx = std::max(mx, static_cast<double>(row[j]));
    double sum = 0;
    for (int64_t j = 0; j < c; ++j) sum += std::exp(row[j] - mx);
    loss += mx + std::log(sum) - row[y[i]];
  }
  m["eval_loss"] = n > 0 ? loss / n : 0.0;
  if (!with_class_metrics) {  // multiple choice: the choices are no classes
    m["eval_accuracy"] = accuracy(predicted, y);
    return m;
  }
  const ClassificationMetrics cm = classification_metrics(predicted, y);
  m["eval_accuracy"] = cm.accuracy;
  m["eval_f1"] = cm.f1;
  m["eval_mcc"] = cm.mcc;
  // By the task, not by the classes this eval data happens to hold, so that a
  // score_attribute checked against reported_metric_names is always there.
  if (c > 2) m["eval_macro_f1"] = cm.f1_is_macro ? cm.f1 : macro_f1(predicted, y);
  return m;
}

std::vector<std::string> reported_metric_names(Task task, int64_t num_labels, bool with_eval) {
  std::vector<std::string> names = {"train_loss"};
  if (!with_eval) return names;
  if (task == Task::kTokenClassification) {
    names.insert(names.end(), {"eval_loss", "eval_precision", "eval_recall", "eval_f1", "eval_accuracy"});
  } else if (task == Task::kMultipleChoice) {
    names.insert(names.end(), {"eval_loss", "eval_accuracy"});
  } else if (num_labels == 1) {
    names.insert(names.end(), {"eval_loss", "eval_mse", "eval_pearson"});
  } else {
    names.insert(names.end(), {"eval_loss", "eval_accuracy", "eval_f1", "eval_mcc"});
    if (num_labels > 2) names.push_back("eval_macro_f1");
  }
  return names;
}

void check_score_attribute(const std::string& score_attribute, Task task, int64_t num_labels, bool with_eval) {
  if (score_attribute.empty()) return;
  const std::vector<std::string> names = reported_metric_names(task, num_labels, with_eval);
  if (std::find(names.begin(), names.end(), score_attribute) != names.end()) return;
  std::string list;
  for (const std::string& name : names) list += (list.empty() ? "\"" : ", \"") + name + "\"";
  const std::string what = task != Task::kSequenceClassification ? std::string("model.task = \"") + choice_name(task) + "\""
                           : num_labels == 1 ? std::string("a regression task (model.num_labels = 1)")
                                             : str_format("a %lld-label classification task", static_cast<long long>(num_labels));
  throw Error("checkpoint.score_attribute = \"" + score_attribute + "\" is never reported by " + what +
              (with_eval ? "" : " without data.eval_file") + ", so checkpoints could not be ranked nor early stopping "
              "decide; use one of " + list);
}

Baseline majority_baseline(const Labels& train, const Labels& eval, int64_t num_labels) {
  ST_ASSERT(num_labels >= 2 && train.kind == LabelKind::kClass, "majority_baseline: needs class labels");
  std::vector<int64_t> counts(static_cast<size_t>(num_labels), 0);
  for (int64_t id : train.class_ids) ++counts[static_cast<size_t>(id)];
  Baseline b;
  b.class_id = std::max_element(counts.begin(), counts.end()) - counts.begin();  // the first of the most frequent
  std::vector<float> logits(eval.class_ids.size() * static_cast<size_t>(num_labels), 0.0f);
  for (size_t i = 0; i < eval.class_ids.size(); ++i) logits[i * static_cast<size_t>(num_labels) + b.class_id] = 1.0f;
  b.metrics = eval_metrics(logits, eval, num_labels);
  b.metrics.erase("eval_loss");
  b.name = str_format("majority class (%lld)", static_cast<long long>(b.class_id));
  return b;
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

Baseline chance_baseline(int64_t num_choices) {
  Baseline b;
  b.name = str_format("chance (1 in %lld)", static_cast<long long>(num_choices));
  b.metrics["eval_accuracy"] = 1.0 / static_cast<double>(num_choices);
  return b;
}

}  // namespace shardtrain
