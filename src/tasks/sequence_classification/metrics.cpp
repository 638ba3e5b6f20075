// Sequence classification's metrics and baseline
// (tasks/sequence_classification.h).
#include <algorithm>
#include <cmath>

#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/metrics/metrics.h"
#include "shardtrain/tasks/sequence_classification.h"

namespace shardtrain {

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

}  // namespace shardtrain
