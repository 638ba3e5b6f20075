// Sharded evaluation, for `train`'s reports and for `predict` (docs/DESIGN.md,
// "Exact distributed evaluation"): each rank runs the model on its batches of
// an EvalPlan (Accelerate's even_batches), and gather_for_metrics (data/
// sampler.h) puts every example's logits together once, in input order, on
// every rank; metrics are computed from those, in float64 where it matters.
//
//   std::vector<float> logits = sharded_logits(model, eval_data, 32, pad_id, device, comm);
//   std::map<std::string, double> metrics = eval_metrics(logits, eval_data.labels, num_labels);
//
// Every task (docs/DESIGN.md, "Tasks") evaluates the same way: each rank turns
// its batches' logits into a fixed-width record per example (the logits of a
// sequence; a token task's predicted tag per token and its loss terms), the
// records are gathered exactly, and the task's metrics come from them:
//
//   std::map<std::string, double> metrics = evaluate_task(model, eval_data, 32, pad_id, device, comm);
#pragma once
#include <ATen/core/Tensor.h>
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "shardtrain/core/choices.h"
#include "shardtrain/data/collator.h"
#include "shardtrain/data/dataset.h"

namespace shardtrain {

class SequenceClassifier;
struct EncoderConfig;

// One batch's records: forward_batch()'s logits and the batch -> a CPU float
// tensor [examples, width].
using RecordFn = std::function<at::Tensor(const at::Tensor& logits, const Batch& batch)>;

// Collective over comm: `width` values per example of `data`, made by
// `record` from each batch's logits, gathered in input order on every rank
// (each example once). Eval mode, no autograd, as sharded_logits.
std::vector<float> sharded_records(SequenceClassifier& model, const TokenizedDataset& data, int64_t batch_size,
                                   int32_t pad_id, const at::Device& device, MPI_Comm comm, int64_t width,
                                   const RecordFn& record, std::vector<int64_t>* rows = nullptr);

// Token classification's record of one example: the predicted tag of each
// token position up to token_record_positions(data) (-1 beyond the
// sequence), then the summed cross-entropy of its labelled tokens and their
// number.
int64_t token_record_positions(const TokenizedDataset& data);
RecordFn token_record(int64_t positions);

// The task's eval metrics on `data` (collective over comm): sequence
// classification as eval_metrics; multiple choice eval_loss, eval_accuracy;
// token classification eval_loss (mean over labelled tokens), eval_precision,
// eval_recall, eval_f1, eval_accuracy (train/entity_metrics.h) and
// eval_<type>_f1 per entity type. `tag_names`: token classification's tags.
std::map<std::string, double> evaluate_task(SequenceClassifier& model, const TokenizedDataset& data,
                                            int64_t batch_size, int32_t pad_id, const at::Device& device,
                                            MPI_Comm comm, const std::vector<std::string>& tag_names);

// Token classification's metrics from gathered token records (token_record)
// against data's token labels, each example's labelled positions only.
std::map<std::string, double> token_metrics(const std::vector<float>& records, int64_t positions,
                                            const TokenizedDataset& data, const std::vector<std::string>& tag_names);
// Multiple choice's: logits [examples x choices] against data.labels.
std::map<std::string, double> choice_metrics(const std::vector<float>& logits, const TokenizedDataset& data);

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
// with_class_metrics false: eval_loss and eval_accuracy only (multiple choice,
// where the "classes" are the choices' positions).
std::map<std::string, double> eval_metrics(const std::vector<float>& logits, const Labels& labels, int64_t num_labels,
                                           bool with_class_metrics = true);

// The metrics every report of this task holds: train_loss, and with eval
// data the names its evaluation gives (sequence classification: by
// num_labels, eval_macro_f1 for more than two; the per-type F1 of token
// classification depends on the data and is left out).
std::vector<std::string> reported_metric_names(Task task, int64_t num_labels, bool with_eval);

// Refuses (Error naming checkpoint.score_attribute and the allowed names) a
// score_attribute that no report of this task holds: with it, keep-best-N and
// early stopping would silently do nothing. "" is fine.
void check_score_attribute(const std::string& score_attribute, Task task, int64_t num_labels, bool with_eval);

// The majority-class baseline: what always predicting the training data's
// most frequent class (ties: the smaller id) scores on `eval`, by the same
// definitions as eval_metrics (eval_loss left out: a constant guess has none
// worth comparing). For classification only; `class_id` is that class.
struct Baseline {
  std::string name;  // "majority class (1)", "every word O", "chance (1 in 4)"
  int64_t class_id = 0;
  std::map<std::string, double> metrics;
};
Baseline majority_baseline(const Labels& train, const Labels& eval, int64_t num_labels);
// Token classification: tagging every word "O" (or, without an "O" tag, the
// training data's most frequent tag), scored by token_metrics.
Baseline outside_baseline(const TokenizedDataset& train, const TokenizedDataset& eval,
                          const std::vector<std::string>& tag_names);
// Multiple choice: the chance rate, 1 / choices (eval_accuracy).
Baseline chance_baseline(int64_t num_choices);

}  // namespace shardtrain
