#include "shardtrain/metrics/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain {
namespace {

template <class T>
void check_pair(const std::vector<T>& predictions, const std::vector<T>& labels, const char* what) {
  if (predictions.size() != labels.size())
    throw Error(str_format("%s: %zu predictions but %zu labels", what, predictions.size(), labels.size()));
  if (predictions.empty()) throw Error(str_format("%s: no examples", what));
}

int64_t class_count(const std::vector<int64_t>& predictions, const std::vector<int64_t>& labels, const char* what) {
  check_pair(predictions, labels, what);
  int64_t max_id = 1;
  for (size_t i = 0; i < labels.size(); ++i) {
    if (predictions[i] < 0 || labels[i] < 0) throw Error(str_format("%s: negative class id", what));
    max_id = std::max({max_id, predictions[i], labels[i]});
  }
  return max_id + 1;
}

double f1_of(int64_t tp, int64_t fp, int64_t fn) {
  const int64_t denominator = 2 * tp + fp + fn;
  return denominator == 0 ? 0.0 : 2.0 * static_cast<double>(tp) / static_cast<double>(denominator);
}

}  // namespace

double accuracy(const std::vector<int64_t>& predictions, const std::vector<int64_t>& labels) {
  check_pair(predictions, labels, "accuracy");
  int64_t correct = 0;
  for (size_t i = 0; i < labels.size(); ++i) correct += predictions[i] == labels[i];
  return static_cast<double>(correct) / static_cast<double>(labels.size());
}

std::vector<int64_t> confusion_matrix(const std::vector<int64_t>& predictions, const std::vector<int64_t>& labels,
                                      int64_t num_classes) {
  check_pair(predictions, labels, "confusion_matrix");
  std::vector<int64_t> counts(num_classes * num_classes, 0);
  for (size_t i = 0; i < labels.size(); ++i) {
    const int64_t t = labels[i], p = predictions[i];
    if (t < 0 || p < 0 || t >= num_classes || p >= num_classes)
      throw Error(str_format("confusion_matrix: class id outside [0, %lld)", static_cast<long long>(num_classes)));
    ++counts[t * num_classes + p];
  }
  return counts;
}

double binary_f1(const std::vector<int64_t>& predictions, const std::vector<int64_t>& labels,
                 int64_t positive_class) {
  check_pair(predictions, labels, "binary_f1");
  int64_t tp = 0, fp = 0, fn = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    const bool predicted = predictions[i] == positive_class, actual = labels[i] == positive_class;
    tp += predicted && actual;
    fp += predicted && !actual;
    fn += !predicted && actual;
  }
  return f1_of(tp, fp, fn);
}

double macro_f1(const std::vector<int64_t>& predictions, const std::vector<int64_t>& labels) {
  const int64_t k = class_count(predictions, labels, "macro_f1");
  const std::vector<int64_t> c = confusion_matrix(predictions, labels, k);
  double sum = 0;
  int64_t present = 0;
  for (int64_t j = 0; j < k; ++j) {
    int64_t row = 0, column = 0;
    for (int64_t m = 0; m < k; ++m) {
      row += c[j * k + m];
      column += c[m * k + j];
    }
    if (row == 0 && column == 0) continue;  // class absent from both sides: sklearn leaves it out
    const int64_t tp = c[j * k + j];
    sum += f1_of(tp, column - tp, row - tp);
    ++present;
  }
  return sum / static_cast<double>(present);
}

double matthews_corrcoef(const std::vector<int64_t>& predictions, const std::vector<int64_t>& labels) {
  const int64_t k = class_count(predictions, labels, "matthews_corrcoef");
  const std::vector<int64_t> c = confusion_matrix(predictions, labels, k);
  // Doubles throughout: n^2 overflows nothing for any realistic eval set.
  const double n = static_cast<double>(labels.size());
  double correct = 0, pt = 0, pp = 0, tt = 0;
  for (int64_t j = 0; j < k; ++j) {
    double t = 0, p = 0;
    for (int64_t m = 0; m < k; ++m) {
      t += static_cast<double>(c[j * k + m]);
      p += static_cast<double>(c[m * k + j]);
    }
    correct += static_cast<double>(c[j * k + j]);
    pt += p * t;
    pp += p * p;
    tt += t * t;
  }
  const double denominator = std::sqrt((n * n - pp) * (n * n - tt));
  return denominator == 0 ? 0.0 : (correct * n - pt) / denominator;
}

double mean_squared_error(const std::vector<float>& predictions, const std::vector<float>& labels) {
  check_pair(predictions, labels, "mean_squared_error");
  double sum = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    const double d = static_cast<double>(predictions[i]) - static_cast<double>(labels[i]);
    sum += d * d;
  }
  return sum / static_cast<double>(labels.size());
}

double pearson(const std::vector<float>& predictions, const std::vector<float>& labels) {
  check_pair(predictions, labels, "pearson");
  const double n = static_cast<double>(labels.size());
  double mean_x = 0, mean_y = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    mean_x += predictions[i];
    mean_y += labels[i];
  }
  mean_x /= n;
  mean_y /= n;
  // Centred two-pass sums: the one-pass formula loses the correlation of
  // nearly constant predictions to cancellation.
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    const double dx = predictions[i] - mean_x, dy = labels[i] - mean_y;
    sxy += dx * dy;
    sxx += dx * dx;
    syy += dy * dy;
  }
  if (sxx == 0 || syy == 0) return std::numeric_limits<double>::quiet_NaN();
  return sxy / std::sqrt(sxx * syy);
}

ClassificationMetrics classification_metrics(const std::vector<int64_t>& predictions,
                                             const std::vector<int64_t>& labels) {
  ClassificationMetrics m;
  m.num_classes = class_count(predictions, labels, "classification_metrics");
  m.count = static_cast<int64_t>(labels.size());
  m.accuracy = accuracy(predictions, labels);
  m.f1_is_macro = m.num_classes > 2;
  m.f1 = m.f1_is_macro ? macro_f1(predictions, labels) : binary_f1(predictions, labels, 1);
  m.mcc = matthews_corrcoef(predictions, labels);
  return m;
}

std::string ClassificationMetrics::summary() const {
  if (f1_is_macro) return str_format("accuracy %.4f macro_f1 %.4f mcc %.4f", accuracy, f1, mcc);
  return str_format("accuracy %.4f f1 %.4f", accuracy, f1);
}

RegressionMetrics regression_metrics(const std::vector<float>& predictions, const std::vector<float>& labels) {
  RegressionMetrics m;
  m.count = static_cast<int64_t>(labels.size());
  m.mse = mean_squared_error(predictions, labels);
  m.pearson = pearson(predictions, labels);
  return m;
}

std::string RegressionMetrics::summary() const { return str_format("mse %.4f pearson %.4f", mse, pearson); }

}  // namespace shardtrain
