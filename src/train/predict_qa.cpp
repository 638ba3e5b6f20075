#include "shardtrain/train/predict_qa.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "shardtrain/comm/mpi_helpers.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"
#include "shardtrain/core/log.h"
#include "shardtrain/data/qa_features.h"
#include "shardtrain/train/evaluate.h"
#include "shardtrain/train/preflight.h"

namespace shardtrain {
namespace {

// %.9g reads back as the same float; JSON has no NaN / Infinity.
std::string qa_json_number(double value) {
  if (!std::isfinite(value)) return "null";
  return str_format("%.9g", value);
}

void check_qa_predict_options(const PredictOptions& options, const QaPredictOptions& qa, const PredictModel& model) {
  if (model.config.task != Task::kQuestionAnswering)
    throw Error(model.config_source + ": not a question-answering model (architectures " +
                model.config.architecture() + ")");
  if (options.max_length < 1)
    throw Error(str_format("--max-length %d: a question-answering window needs a length (run_qa's is %d)",
                           options.max_length, kQaDefaultMaxLength));
  check_predict_settings(options, model);
  model.model->set_unpadded(options.unpadded);
  if (qa.doc_stride < 0 || qa.doc_stride >= options.max_length)
    throw Error(str_format("--doc-stride %d: must be in [0, --max-length %d)", qa.doc_stride, options.max_length));
  if (qa.postprocess.n_best_size < 1)
    throw Error(str_format("--n-best-size %lld: must be >= 1", static_cast<long long>(qa.postprocess.n_best_size)));
  if (qa.postprocess.max_answer_length < 1)
    throw Error(str_format("--max-answer-length %lld: must be >= 1",
                           static_cast<long long>(qa.postprocess.max_answer_length)));
  if (!std::isfinite(qa.postprocess.null_score_diff_threshold))
    throw Error("--null-score-diff-threshold: must be a finite number");
  if (options.format != FileFormat::kAuto && options.format != FileFormat::kJsonl)
    throw Error("--format: question answering reads SQuAD JSON or HF's flattened JSON Lines (auto or jsonl)");
  if (options.on_bad_row != BadRowPolicy::kError)
    throw Error("--on-bad-row skip: a question-answering file is read whole; a bad question is an error naming it");
  if (!options.text_a.empty() || !options.text_b.empty() || !options.label.empty())
    throw Error("--text-a / --text-b / --label do not apply to a question-answering model: the question, context "
                "and answers are SQuAD's fields (id, question, context, answers)");
}

}  // namespace

QaPredictResult predict_qa_file(const PredictOptions& options, const QaPredictOptions& qa, const PredictModel& model,
                                MPI_Comm comm) {
  check_qa_predict_options(options, qa, model);
  DataConfig data;  // (question, context) pairs: the token types the model must take
  data.text_b = "context";
  check_model_for_data(model.config, data, model.tokenizer.max_token_type(true), model.config_source);

  QaPredictResult result;
  ST_CHECK_MPI(MPI_Comm_size(comm, &result.world_size));
  result.version_2 = qa.postprocess.version_2_with_negative;
  QaReadOptions read;
  const bool maybe_scored = !qa.with_answers && qa.answers_if_present;
  read.read_answers = qa.with_answers || maybe_scored;
  read.answers_if_present = maybe_scored;
  read.allow_unanswered = !qa.with_answers || result.version_2;
  result.table = read_qa_table(options.data_path, read);
  if (result.table.size() == 0) throw Error(options.data_path + ": no questions to predict");
  bool scored = qa.with_answers;
  if (maybe_scored) {
    int64_t unanswered = 0;
    for (const QaExample& e : result.table.examples) unanswered += e.answer_texts.empty() ? 1 : 0;
    if (result.table.num_without_answers_field > 0)
      result.unscored_reason = str_format("%lld of %lld questions have no \"answers\" field",
                                          static_cast<long long>(result.table.num_without_answers_field),
                                          static_cast<long long>(result.table.size()));
    else if (unanswered > 0 && !result.version_2)
      result.unscored_reason = str_format("%lld of %lld questions have no gold answer (SQuAD v1)",
                                          static_cast<long long>(unanswered),
                                          static_cast<long long>(result.table.size()));
    scored = result.unscored_reason.empty();
  }

  const double start = MPI_Wtime();
  QaFeatureOptions features_options;
  features_options.max_length = options.max_length;
  features_options.doc_stride = qa.doc_stride;
  features_options.with_labels = scored;  // the answers' spans: eval_loss, as evaluation reports it
  const TokenizedDataset features = build_qa_features(result.table, model.tokenizer, features_options, comm);
  result.num_features = features.size();
  if (scored) {
    result.metrics = evaluate_qa(*model.model, features, result.table, qa.postprocess, options.batch_size,
                                 model.tokenizer.pad_id(), at::kCPU, comm, &result.answers);
  } else {
    const int64_t n_best = qa.postprocess.n_best_size;
    const std::vector<float> records =
        sharded_records(*model.model, features, options.batch_size, model.tokenizer.pad_id(), at::kCPU, comm,
                        qa_record_width(n_best), qa_record(n_best));
    result.answers = postprocess_qa(result.table, features, records, qa.postprocess);
  }
  result.seconds = max_over_ranks(MPI_Wtime() - start, comm, "predict: the time taken");
  return result;
}

std::string qa_prediction_json_line(const QaPredictResult& result, int64_t question) {
  ST_ASSERT(question >= 0 && question < result.table.size(), "qa_prediction_json_line: question out of range");
  const QaAnswer& a = result.answers[static_cast<size_t>(question)];
  const bool has_span = a.start_char >= 0;
  std::string out = str_format("{\"row\":%lld,\"line\":%lld,\"id\":", static_cast<long long>(question),
                               static_cast<long long>(result.table.line_numbers[static_cast<size_t>(question)]));
  out += nlohmann::json(result.table.examples[static_cast<size_t>(question)].id).dump();
  out += ",\"answer\":" + nlohmann::json(a.text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  out += ",\"start\":" + (has_span ? std::to_string(a.start_char) : std::string("null"));
  out += ",\"end\":" + (has_span ? std::to_string(a.end_char) : std::string("null"));
  out += ",\"score\":" + qa_json_number(a.score) + ",\"probability\":" + qa_json_number(a.probability);
  if (result.version_2)
    out += ",\"null_score\":" + qa_json_number(a.null_score) + ",\"score_diff\":" + qa_json_number(a.score_diff);
  out += '}';
  return out;
}

void write_qa_predictions_jsonl(const QaPredictResult& result, const std::string& path) {
  OutputFile out(path, "--output");
  std::string chunk;
  for (int64_t q = 0; q < result.table.size(); ++q) {
    chunk += qa_prediction_json_line(result, q);
    chunk += '\n';
    if (chunk.size() > (1u << 20) || q + 1 == result.table.size()) {
      out.write(chunk);
      chunk.clear();
    }
  }
  out.commit();
}

namespace {

// {"id": value(q), ...} in question order (ids are unique: data/qa_data.h).
template <class F>
void write_qa_id_map(const QaPredictResult& result, const std::string& path, F value) {
  nlohmann::ordered_json map = nlohmann::ordered_json::object();
  for (int64_t q = 0; q < result.table.size(); ++q) map[result.table.examples[static_cast<size_t>(q)].id] = value(q);
  OutputFile out(path, "predictions file");
  out.write(map.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  out.commit();
}

}  // namespace

void write_qa_predictions_json(const QaPredictResult& result, const std::string& path) {
  write_qa_id_map(result, path, [&](int64_t q) { return result.answers[static_cast<size_t>(q)].text; });
}

void write_qa_null_odds_json(const QaPredictResult& result, const std::string& path) {
  write_qa_id_map(result, path, [&](int64_t q) { return result.answers[static_cast<size_t>(q)].score_diff; });
}

std::string qa_file_beside(const std::string& output, const std::string& name) {
  if (output == "-") return "";
  const std::filesystem::path path(output);
  return (path.has_parent_path() ? path.parent_path() / name : std::filesystem::path(name)).string();
}

}  // namespace shardtrain
