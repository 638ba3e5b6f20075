// Extractive QA from logits to answers and scores: transformers'
// postprocess_qa_predictions (utils_qa.py), evaluated sharded and exactly
// (docs/DESIGN.md, "Question answering").
//
// Each rank runs its share of the features (windows) and keeps a fixed-width
// record per feature: its n-best start and end positions with their logits,
// the null (position 0) logits and its loss. The records are gathered in
// feature order (sharded_records, train/evaluate.h), so every rank holds all
// of them, whichever rank ran a window, and each question is post-processed
// once from all its windows: the same answers at any rank count.
//
// Post-processing of one question (utils_qa.py):
//   - over its features in order, every pair of the feature's n-best starts
//     and ends (logits descending; equal logits: the later position first)
//     with both inside the context, end >= start and end - start + 1 <=
//     max_answer_length, scored start_logit + end_logit (float32);
//   - v2: the null candidate, the feature with the smallest position-0
//     start + end logits, joins them;
//   - sorted by score (stable), the first n_best_size kept (v2: the null one
//     added back if it fell out); texts cut from the context by character
//     offsets; no candidate, or only an empty one: "empty", score 0;
//   - v1: the best candidate's text; v2: the best non-empty candidate's,
//     unless null_score - its start and end logits > null_score_diff_threshold,
//     then "".
//
//   std::vector<float> records = sharded_records(model, features, 32, pad, device, comm,
//                                                qa_record_width(20), qa_record(20));
//   std::vector<QaAnswer> answers = postprocess_qa(table, features, records, {});
#pragma once

#include <ATen/core/Tensor.h>
#include <mpi.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shardtrain/data/dataset.h"
#include "shardtrain/data/qa_data.h"
#include "shardtrain/train/evaluate.h"

namespace shardtrain {

class SequenceClassifier;

struct QaPostprocessOptions {
  int64_t n_best_size = 20;                // data.n_best_size
  int64_t max_answer_length = 30;          // data.max_answer_length
  bool version_2_with_negative = false;    // data.version_2_with_negative
  double null_score_diff_threshold = 0.0;  // data.null_score_diff_threshold
};

// A feature's record: [0] start and [1] end logit at position 0, [2] its loss
// ((start + end cross-entropy) / 2 over its real tokens; 0 without labels),
// then n start positions (-1 past the feature's tokens), their n logits, n end
// positions, their n logits.
int64_t qa_record_width(int64_t n_best_size);
// logits [B, L, 2] as forward_batch gives them (padding -inf), labels [B, 2] or undefined.
RecordFn qa_record(int64_t n_best_size);

// One question's answer.
struct QaAnswer {
  std::string text;            // "" = no answer (v2)
  int64_t start_char = -1;     // [start_char, end_char) in the context; -1 for "" and "empty"
  int64_t end_char = -1;
  double score = 0;            // start_logit + end_logit of the chosen span
  double probability = 0;      // softmax over the n-best scores
  double null_score = 0;       // v2: the smallest position-0 start + end logits
  double score_diff = 0;       // v2: null_score - the best non-empty span's score (run_qa's null_odds)
};

// Every question of `table` (in its order) from the gathered records of its
// features (build_qa_features of the same table).
std::vector<QaAnswer> postprocess_qa(const QaTable& table, const TokenizedDataset& features,
                                     const std::vector<float>& records, const QaPostprocessOptions& options);

// The official metrics of the answers against table's gold answers, named as
// run_qa reports them: v1 eval_exact_match, eval_f1; v2 eval_exact, eval_f1,
// eval_total, eval_HasAns_*, eval_NoAns_*, eval_best_* (train/squad_metrics.h).
std::map<std::string, double> qa_metrics(const QaTable& table, const std::vector<QaAnswer>& answers, bool version_2);

// Collective over comm: the records, the answers and qa_metrics, with
// eval_loss (the features' mean loss) when the features have span labels.
std::map<std::string, double> evaluate_qa(SequenceClassifier& model, const TokenizedDataset& features,
                                          const QaTable& table, const QaPostprocessOptions& options,
                                          int64_t batch_size, int32_t pad_id, const at::Device& device, MPI_Comm comm,
                                          std::vector<QaAnswer>* answers = nullptr);

// The metric names qa_metrics gives (for checkpoint.score_attribute).
std::vector<std::string> qa_metric_names(bool version_2);

// The "first sentence of the context" baseline: each question answered with
// its context up to the first '.', '!' or '?' followed by whitespace (or the
// whole context), scored by qa_metrics.
Baseline first_sentence_baseline(const QaTable& table, bool version_2);

}  // namespace shardtrain
