// Metrics against values computed by hand (worked out in the comments).
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <cmath>

#include "shardtrain/core/check.h"
#include "shardtrain/metrics/metrics.h"

using namespace shardtrain;

namespace {

// (Not "Ids": test files share translation units, and test_tokenizer.cpp has its own Ids.)
using LabelIds = std::vector<int64_t>;

// Expand a confusion matrix (rows = true label, columns = prediction) into pairs.
void from_confusion(const std::vector<std::vector<int64_t>>& c, LabelIds* predictions, LabelIds* labels) {
  for (size_t t = 0; t < c.size(); ++t)
    for (size_t p = 0; p < c[t].size(); ++p)
      for (int64_t n = 0; n < c[t][p]; ++n) {
        labels->push_back(static_cast<int64_t>(t));
        predictions->push_back(static_cast<int64_t>(p));
      }
}
}  // namespace

TEST_CASE("accuracy and binary F1") {
  // Rows 0, 1, 3 right -> 3/5. Class 1: TP = row 1, FP = rows 2 and 4, FN = 0 -> 2*1 / (2+2+0) = 0.5.
  const LabelIds predictions = {0, 1, 1, 0, 1}, labels = {0, 1, 0, 0, 0};
  CHECK(accuracy(predictions, labels) == doctest::Approx(0.6).epsilon(1e-15));
  CHECK(binary_f1(predictions, labels) == doctest::Approx(0.5).epsilon(1e-15));
  // Class 0 as positive: TP = 2 (rows 0, 3), FP = 0, FN = 2 (rows 2, 4) -> 4/6.
  CHECK(binary_f1(predictions, labels, 0) == doctest::Approx(2.0 / 3.0).epsilon(1e-15));

  // No positives predicted: TP = FP = 0, FN = 2 -> 0 (not NaN).
  CHECK(binary_f1({0, 0, 0}, {0, 1, 1}) == 0.0);
  // No positives anywhere: the denominator is 0 -> 0 (sklearn zero_division=0).
  CHECK(binary_f1({0, 0}, {0, 0}) == 0.0);
  CHECK(binary_f1({1, 0, 1}, {1, 0, 1}) == 1.0);

  const ClassificationMetrics m = classification_metrics(predictions, labels);
  CHECK(m.count == 5);
  CHECK(m.num_classes == 2);
  CHECK_FALSE(m.f1_is_macro);
  CHECK(m.accuracy == doctest::Approx(0.6));
  CHECK(m.f1 == doctest::Approx(0.5));
  CHECK(m.summary() == "accuracy 0.6000 f1 0.5000");
}

TEST_CASE("binary MCC equals the 2x2 formula") {
  // TP 1, TN 2, FP 2, FN 0: (TP TN - FP FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = 2 / sqrt(3*1*4*2).
  CHECK(matthews_corrcoef({0, 1, 1, 0, 1}, {0, 1, 0, 0, 0}) == doctest::Approx(2.0 / std::sqrt(24.0)).epsilon(1e-15));
  // Constant predictions: denominator 0 -> 0.
  CHECK(matthews_corrcoef({1, 1, 1}, {0, 1, 0}) == 0.0);
}

TEST_CASE("3-class macro F1 and MCC from a known confusion matrix") {
  //            predicted 0  1  2     row sums t = 7 5 6, column sums p = 6 7 5, n = 18, trace 12
  // true 0              5  2  0
  // true 1              1  3  1
  // true 2              0  2  4
  LabelIds predictions, labels;
  from_confusion({{5, 2, 0}, {1, 3, 1}, {0, 2, 4}}, &predictions, &labels);
  REQUIRE(labels.size() == 18);
  CHECK(confusion_matrix(predictions, labels, 3) == LabelIds{5, 2, 0, 1, 3, 1, 0, 2, 4});
  CHECK(accuracy(predictions, labels) == doctest::Approx(12.0 / 18.0).epsilon(1e-15));
  // F1 per class: 0: tp 5 fp 1 fn 2 -> 10/13; 1: tp 3 fp 4 fn 2 -> 6/12; 2: tp 4 fp 1 fn 2 -> 8/11.
  const double macro = (10.0 / 13.0 + 0.5 + 8.0 / 11.0) / 3.0;
  CHECK(macro_f1(predictions, labels) == doctest::Approx(macro).epsilon(1e-15));
  // MCC = (12*18 - sum p t) / sqrt((18^2 - sum p^2)(18^2 - sum t^2))
  //     = (216 - 107) / sqrt((324 - 110)(324 - 110)) = 109 / 214.
  CHECK(matthews_corrcoef(predictions, labels) == doctest::Approx(109.0 / 214.0).epsilon(1e-15));

  const ClassificationMetrics m = classification_metrics(predictions, labels);
  CHECK(m.num_classes == 3);
  CHECK(m.f1_is_macro);
  CHECK(m.f1 == doctest::Approx(macro));
  CHECK(m.mcc == doctest::Approx(109.0 / 214.0));
}

TEST_CASE("macro F1 leaves out classes absent from labels and predictions") {
  // Class 1 never occurs: class 0 tp 1 fp 1 fn 0 -> 2/3, class 2 tp 1 fp 0 fn 1 -> 2/3; mean 2/3, not 4/9.
  CHECK(macro_f1({0, 0, 2}, {0, 2, 2}) == doctest::Approx(2.0 / 3.0).epsilon(1e-15));
  // A class only predicted counts (F1 0): class 0 tp 1 fp 0 fn 1 -> 2/3, class 1 fp 1 -> 0; mean 1/3.
  CHECK(macro_f1({0, 1}, {0, 0}) == doctest::Approx(1.0 / 3.0).epsilon(1e-15));
}

TEST_CASE("regression: MSE and Pearson") {
  // Differences -1 -2 -2 -5 -> (1 + 4 + 4 + 25) / 4 = 8.5.
  const std::vector<float> x = {1, 2, 3, 4}, y = {2, 4, 5, 9};
  CHECK(mean_squared_error(x, y) == doctest::Approx(8.5).epsilon(1e-15));
  // Centred: dx = -1.5 -0.5 0.5 1.5, dy = -3 -1 0 4; sxy = 11, sxx = 5, syy = 26 -> 11 / sqrt(130).
  CHECK(pearson(x, y) == doctest::Approx(11.0 / std::sqrt(130.0)).epsilon(1e-14));
  CHECK(pearson(x, {-1, -2, -3, -4}) == doctest::Approx(-1.0).epsilon(1e-14));
  CHECK(std::isnan(pearson({1, 1, 1}, {1, 2, 3})));
  // Large offset, tiny spread: the two-pass sums keep the exact correlation 1.
  CHECK(pearson({1000.25f, 1000.5f, 1000.75f}, {1, 2, 3}) == doctest::Approx(1.0).epsilon(1e-12));

  const RegressionMetrics m = regression_metrics(x, y);
  CHECK(m.count == 4);
  CHECK(m.mse == doctest::Approx(8.5));
  CHECK(m.summary() == "mse 8.5000 pearson 0.9648");
}

TEST_CASE("bad input is an error") {
  CHECK_THROWS_AS(accuracy({0, 1}, {0}), Error);
  CHECK_THROWS_AS(accuracy({}, {}), Error);
  CHECK_THROWS_AS(macro_f1({-1}, {0}), Error);
  CHECK_THROWS_AS(confusion_matrix({3}, {0}, 2), Error);
  CHECK_THROWS_AS(pearson({1.0f}, {1.0f, 2.0f}), Error);
}
