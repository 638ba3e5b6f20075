// Sequence classification (model.task = "sequence_classification", GLUE's
// tasks): a text or a pair of texts -> one of num_labels classes, or a value
// (regression, num_labels = 1), as <Family>ForSequenceClassification.
//
// Files: tsv / csv / jsonl rows (data/reader.h), data.text_a, data.text_b and
// data.label by header name or index. String labels take ids in sorted order
// of the training data (HF datasets' ClassLabel); predict maps them through
// the model's id2label. Metrics (eval_metrics) follow scikit-learn / scipy as
// HF `evaluate` calls them (metrics/metrics.h).
//
//   std::map<std::string, double> m = eval_metrics(logits, data.labels, 2);   // eval_loss, eval_accuracy, ...
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shardtrain/data/reader.h"
#include "shardtrain/tasks/task_spec.h"

namespace shardtrain {

// The eval metrics of gathered logits against `labels` (one per row):
// classification eval_loss (cross-entropy, float64), eval_accuracy, eval_f1,
// eval_mcc (and eval_macro_f1 when num_labels > 2); regression
// (num_labels 1) eval_loss = eval_mse, eval_pearson.
// with_class_metrics false: eval_loss and eval_accuracy only (multiple choice,
// where the "classes" are the choices' positions).
std::map<std::string, double> eval_metrics(const std::vector<float>& logits, const Labels& labels, int64_t num_labels,
                                           bool with_class_metrics = true);

// The majority-class baseline: what always predicting the training data's
// most frequent class (ties: the smaller id) scores on `eval`, by the same
// definitions as eval_metrics (eval_loss left out: a constant guess has none
// worth comparing). For classification only; `class_id` is that class.
Baseline majority_baseline(const Labels& train, const Labels& eval, int64_t num_labels);

// A file of texts as read (data/reader.h's RawTable); in predict its labels
// are the model's class ids.
using TextTable = TableOf<RawTable>;

// predict's outputs: every row's logits, and its class (the first argmax) or
// value (regression).
class ClassPredictions : public TaskPredictions {
 public:
  int64_t num_labels = 0;                // logits per row; 1 = regression
  bool regression = false;
  std::vector<float> logits;             // row i at [i * num_labels, (i + 1) * num_labels)
  std::vector<int64_t> predicted_ids;    // classification
  std::vector<std::string> label_names;  // the model's id2label when it has names of its own; else empty
  std::vector<int64_t> line_numbers;
  Labels labels;                         // the file's, as the model's class ids / values (kNone without)

  // {"row":i,"line":L,"logits":[...],"label":id[,"label_name":"name"]}; regression
  // {"row":i,"line":L,"logits":[v],"prediction":v}. Floats with 9 significant digits.
  std::string json_line(int64_t row) const override;
};

}  // namespace shardtrain
