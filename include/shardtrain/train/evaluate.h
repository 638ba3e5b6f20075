// Sharded evaluation, for `train`'s reports and for `predict` (docs/DESIGN.md,
// "Exact distributed evaluation"): each rank runs the model on its batches of
// an EvalPlan (Accelerate's even_batches), and gather_for_metrics (data/
// sampler.h) puts every example's logits together once, in input order, on
// every rank; metrics are computed from those, in float64 where it matters.
//
//   std::vector<float> logits = sharded_logits(model, eval_data, 32, pad_id, device, comm);
//   std::map<std::string, double> metrics = eval_metrics(logits, eval_data.labels, num_labels);
#pragma once
#include <ATen/core/Tensor.h>
#include <mpi.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shardtrain/data/dataset.h"

namespace shardtrain {

class SequenceClassifier;

// Collective over comm: logits of every row of `data` ([rows x num_labels],
// row-major, float32), the same on every rank. The model runs in eval mode
// without autograd (its mode is restored afterwards); batches of `batch_size`
// rows per rank, padded with `pad_id`, moved to `device`. `rows`, when given,
// receives the row index of every gathered logits row, gathered the same way
// (0, 1, 2, ...: a check of the plan).
std::vector<float> sharded_logits(SequenceClassifier& model, const TokenizedDataset& data,
                                  int64_t batch_size, int32_t pad_id, const at::Device& device, MPI_Comm comm,
                                  std::vector<int64_t>* rows = nullptr);

// The eval metrics of gathered logits against `labels` (one per row):
// classification eval_loss (cross-entropy, float64), eval_accuracy, eval_f1,
// eval_mcc (and eval_macro_f1 when num_labels > 2); regression
// (num_labels 1) eval_loss = eval_mse, eval_pearson.
std::map<std::string, double> eval_metrics(const std::vector<float>& logits, const Labels& labels, int64_t num_labels);

// The metrics a report holds for this task: train_loss, and with eval data
// the names eval_metrics gives for num_labels labels (eval_macro_f1 for more
// than two).
std::vector<std::string> reported_metric_names(int64_t num_labels, bool with_eval);

// Refuses (Error naming checkpoint.score_attribute and the allowed names) a
// score_attribute that no report of this task holds: with it, keep-best-N and
// early stopping would silently do nothing. "" is fine.
void check_score_attribute(const std::string& score_attribute, int64_t num_labels, bool with_eval);

// The majority-class baseline: what always predicting the training data's
// most frequent class (ties: the smaller id) scores on `eval`, by the same
// definitions as eval_metrics (eval_loss left out: a constant guess has none
// worth comparing). For classification only; `class_id` is that class.
struct Baseline {
  int64_t class_id = 0;
  std::map<std::string, double> metrics;
};
Baseline majority_baseline(const Labels& train, const Labels& eval, int64_t num_labels);

}  // namespace shardtrain
