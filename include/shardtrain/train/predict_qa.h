// `predict` for a question-answering model (config.task question_answering):
// a SQuAD JSON or flattened JSON Lines file (data/qa_data.h) -> one answer per
// question, in input order, sharded over the ranks of a communicator.
//
// The questions are cut into windows (data/qa_features.h, run_qa.py's
// prepare_validation_features), each rank runs its share of the windows, the
// n-best records are gathered exactly and every question is post-processed
// from all its windows (train/qa_postprocess.h): the answers are the ones
// evaluation gives, at any rank count.
//
//   PredictModel model = load_predict_model(options, comm);  // train/predict.h
//   QaPredictOptions qa;                                    // run_qa's defaults
//   QaPredictResult result = predict_qa_file(options, qa, model, comm);
//   if (rank == 0) {
//     write_qa_predictions_jsonl(result, "answers.jsonl");
//     write_qa_predictions_json(result, qa_predictions_json_path("answers.jsonl"));
//   }
#pragma once

#include <mpi.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shardtrain/data/qa_data.h"
#include "shardtrain/train/predict.h"
#include "shardtrain/train/qa_postprocess.h"

namespace shardtrain {

// run_qa.py's max_seq_length: the window length when --max-length is not given.
inline constexpr int kQaDefaultMaxLength = 384;

struct QaPredictOptions {
  int doc_stride = 128;                    // --doc-stride: tokens shared by consecutive windows
  QaPostprocessOptions postprocess;        // --n-best-size, --max-answer-length, --version-2-with-negative, ...
  // --with-answers: read the file's gold answers and score the predictions
  // (the official EM / F1); without it the answers are not read.
  bool with_answers = false;
  // A checkpoint's default (the run scored its eval file): score when every
  // question of the file has gold answers (SQuAD v1: at least one each; v2:
  // the "answers" field), else predict without scores.
  bool answers_if_present = false;
};

// Identical on every rank after predict_qa_file returns.
struct QaPredictResult {
  QaTable table;                 // the questions, in file order
  std::vector<QaAnswer> answers;  // answers[q] for table.examples[q]
  int64_t num_features = 0;       // windows run through the model
  bool version_2 = false;
  std::map<std::string, double> metrics;  // scored: qa_metrics (eval_exact_match, eval_f1, ...)
  std::string unscored_reason;  // answers_if_present and not scored: why ("" otherwise)
  int world_size = 1;
  double seconds = 0;  // windows + forward + gather + post-processing, slowest rank
};

// Collective over comm (every rank passes the same arguments). Uses
// options.data_path, max_length (the window; >= 1), batch_size and
// format (auto or jsonl). Throws Error for a model that is not a
// question-answering one, a bad file or question (named by file and id), a
// doc_stride outside [0, max_length), or n_best_size / max_answer_length < 1.
QaPredictResult predict_qa_file(const PredictOptions& options, const QaPredictOptions& qa, const PredictModel& model,
                                MPI_Comm comm);

// Question q as one JSON object (no newline):
//   {"row":q,"line":L,"id":"...","answer":"...","start":s,"end":e,"score":x,"probability":p}
// start / end: the answer's characters [start, end) in the context (Unicode
// code points, as answer_start), null for no answer; v2 adds "null_score"
// and "score_diff" (null_score minus the best span's score, run_qa's null
// odds). Floats with 9 significant digits.
std::string qa_prediction_json_line(const QaPredictResult& result, int64_t question);

// One line per question to `path` (OutputFile: replaced only when complete;
// "-" standard output).
void write_qa_predictions_jsonl(const QaPredictResult& result, const std::string& path);
// {"id": "answer text", ...} in input order: the official evaluate-v1.1.py /
// evaluate-v2.0.py prediction file.
void write_qa_predictions_json(const QaPredictResult& result, const std::string& path);
// v2: {"id": score_diff, ...}, evaluate-v2.0.py's --na-prob-file (run_qa's null_odds.json).
void write_qa_null_odds_json(const QaPredictResult& result, const std::string& path);

// `name` in the folder of the output `output` ("x/answers.jsonl" ->
// "x/predictions.json"); "" for "-" (standard output has no folder).
std::string qa_file_beside(const std::string& output, const std::string& name);

}  // namespace shardtrain
