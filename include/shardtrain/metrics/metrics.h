// Evaluation metrics over a whole eval set (after gather_for_metrics, so every
// example counts exactly once). They follow scikit-learn / scipy, which is what
// HF `evaluate` ("accuracy", "f1", "matthews_correlation", "pearsonr") calls:
//
//   accuracy          correct / n
//   binary_f1         F1 of the positive class = 2 TP / (2 TP + FP + FN);
//                     0 when that denominator is 0 (sklearn zero_division=0:
//                     no positives predicted and none present)
//   macro_f1          unweighted mean of the per-class F1 over the classes that
//                     occur in labels or predictions (sklearn's default labels)
//   matthews_corrcoef multiclass MCC from the confusion matrix C (n samples,
//                     c = trace, t_k = true count, p_k = predicted count):
//                     (c n - sum p_k t_k) / sqrt((n^2 - sum p_k^2)(n^2 - sum t_k^2)),
//                     0 when the denominator is 0 (sklearn)
//   mean_squared_error, pearson  for regression (num_labels == 1); pearson is
//                     NaN when either side has zero variance (scipy)
// Every function throws shardtrain::Error when the two vectors differ in length
// or are empty, or (classification) an id is negative.
//
//   ClassificationMetrics m = classification_metrics(predicted_ids, label_ids);
//   log_info("accuracy %.4f f1 %.4f", m.accuracy, m.f1);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardtrain {

double accuracy(const std::vector<int64_t>& predictions, const std::vector<int64_t>& labels);
double binary_f1(const std::vector<int64_t>& predictions, const std::vector<int64_t>& labels,
                 int64_t positive_class = 1);
double macro_f1(const std::vector<int64_t>& predictions, const std::vector<int64_t>& labels);
double matthews_corrcoef(const std::vector<int64_t>& predictions, const std::vector<int64_t>& labels);

// counts[t * num_classes + p] = examples with label t predicted as p.
// num_classes must exceed every id.
std::vector<int64_t> confusion_matrix(const std::vector<int64_t>& predictions, const std::vector<int64_t>& labels,
                                      int64_t num_classes);

double mean_squared_error(const std::vector<float>& predictions, const std::vector<float>& labels);
double pearson(const std::vector<float>& predictions, const std::vector<float>& labels);

// The metrics a classifier reports. f1 is binary_f1 (class 1) when
// num_classes <= 2 and macro_f1 otherwise; mcc is always computed.
struct ClassificationMetrics {
  int64_t count = 0;
  int64_t num_classes = 0;  // max(label, prediction) + 1, at least 2
  double accuracy = 0;
  double f1 = 0;
  bool f1_is_macro = false;
  double mcc = 0;
  // "accuracy 0.6838 f1 0.8122" (+ " macro_f1 ... mcc ..." for > 2 classes).
  std::string summary() const;
};
ClassificationMetrics classification_metrics(const std::vector<int64_t>& predictions,
                                             const std::vector<int64_t>& labels);

struct RegressionMetrics {
  int64_t count = 0;
  double mse = 0;
  double pearson = 0;
  std::string summary() const;  // "mse 0.1234 pearson 0.8765"
};
RegressionMetrics regression_metrics(const std::vector<float>& predictions, const std::vector<float>& labels);

}  // namespace shardtrain
