// Extractive question answering (model.task = "question_answering": SQuAD
// v1.1 / v2), as <Family>ForQuestionAnswering and run_qa.py (docs/DESIGN.md,
// "Question answering"; docs/question-answering.md): the questions of a SQuAD
// file (data/qa_data.h) cut into windows (features), start and end logits per
// token, answers post-processed from all windows of a question and scored by
// the official scripts' definitions (metrics/squad_metrics.h).
//
// Features:
//   - the question, left-stripped, goes first, the context second;
//   - a context longer than the window (max_length minus the question and the
//     template's special tokens) is cut into windows that overlap by
//     doc_stride tokens (HF's only_second truncation with
//     return_overflowing_tokens: window w starts at w * (budget - doc_stride);
//     the last ends at the context's end; with a left-truncating tokenizer
//     they are laid from the end, as tokenizers does);
//   - one feature (sequence) per window; every feature of question q has
//     source_rows = q, in window order;
//   - span_labels: the first answer's start and end token, or both the CLS
//     position when the window does not hold the whole answer or there is
//     none (v2). One deviation: when the answer starts in the window's last
//     context token, HF's loop walks on past the context (the label lands on
//     [SEP] or padding); here it is that last context token;
//   - token_spans (with_offsets): each context token's character span
//     [begin, end) in the context (HF's offset_mapping converted from the
//     tokenizer's bytes to Python's code-point indices), {-1, -1} for the
//     question and the special tokens.
//
//   QaFeatureOptions options;   // 384 / 128
//   TokenizedDataset features = build_qa_features(table, tokenizer, options, comm);
//   features.size()             // >= table.size(): one per window
//
// Post-processing: each rank runs its share of the features (windows) and keeps a fixed-width
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
#include "shardtrain/data/tokenizer.h"
#include "shardtrain/tasks/task_spec.h"

namespace shardtrain {

struct QaFeatureOptions {
  int max_length = 384;  // data.max_length
  int doc_stride = 128;  // data.doc_stride
  bool with_offsets = true;  // fill token_spans (evaluation, predict); training does not need them
  bool with_labels = true;   // fill span_labels from the answers (the table has answers)
};

// The features of one question (its windows), exactly as build_qa_features
// makes them; `where` names the question in errors.
std::vector<EncodedRow> qa_question_features(const QaExample& example, const Tokenizer& tokenizer,
                                             const QaFeatureOptions& options);

// Collective over comm: every question's features, in question order, the
// same on every rank (questions sliced over the ranks, as build_dataset does).
// span_labels are filled when the table has answers. Errors name the file and
// the question id.
TokenizedDataset build_qa_features(const QaTable& table, const Tokenizer& tokenizer, const QaFeatureOptions& options,
                                   MPI_Comm comm, const BuildOptions& build = {});

// For each question, its features [first[q], first[q + 1]) (source_rows are
// sorted): first has table.size() + 1 entries.
std::vector<int64_t> features_per_question(const TokenizedDataset& features, int64_t num_questions);


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
// eval_total, eval_HasAns_*, eval_NoAns_*, eval_best_* (metrics/squad_metrics.h).
std::map<std::string, double> qa_metrics(const QaTable& table, const std::vector<QaAnswer>& answers, bool version_2);

// The metric names qa_metrics gives (for checkpoint.score_attribute).
std::vector<std::string> qa_metric_names(bool version_2);

// The "first sentence of the context" baseline: each question answered with
// its context up to the first '.', '!' or '?' followed by whitespace (or the
// whole context), scored by qa_metrics.
Baseline first_sentence_baseline(const QaTable& table, bool version_2);

// A SQuAD file's questions as read.
using QuestionsTable = TableOf<QaTable>;

// predict's outputs: each question's answer.
class QaPredictions : public TaskPredictions {
 public:
  QaTable table;                  // the questions, in file order
  std::vector<QaAnswer> answers;  // answers[q] for table.examples[q]
  bool version_2 = false;
  int64_t num_features = 0;       // windows run through the model

  // {"row":q,"line":L,"id":"...","answer":"...","start":s,"end":e,"score":x,"probability":p}:
  // start / end the answer's characters [start, end) in the context (code
  // points, as answer_start), null for no answer; v2 adds "null_score" and
  // "score_diff" (null_score minus the best span's score, run_qa's null odds).
  // Floats with 9 significant digits.
  std::string json_line(int64_t row) const override;
  // predictions.json ({id: answer}, the official evaluate-v1.1.py /
  // evaluate-v2.0.py input) and, for v2, null_odds.json ({id: score_diff},
  // evaluate-v2.0.py's --na-prob-file), ids in input order.
  std::vector<std::pair<std::string, std::string>> side_files() const override;
};

}  // namespace shardtrain
