// Extractive question answering's spec (tasks/question_answering.h).
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <memory>

#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/tasks/question_answering.h"
#include "tasks/task_common.h"

namespace shardtrain {
namespace {

QaPostprocessOptions postprocess_options(const DataConfig& d) {
  QaPostprocessOptions o;
  o.n_best_size = d.n_best_size;
  o.max_answer_length = d.max_answer_length;
  o.version_2_with_negative = d.version_2_with_negative;
  o.null_score_diff_threshold = d.null_score_diff_threshold;
  return o;
}


// Why a file read for a checkpoint's scores (LabelUse::kIfPresent) is not
// scored, or "" when every question has its gold answers.
std::string unscored_reason(const QaTable& table, bool version_2) {
  if (table.num_without_answers_field > 0)
    return str_format("%lld of %lld questions have no \"answers\" field",
                      static_cast<long long>(table.num_without_answers_field), static_cast<long long>(table.size()));
  int64_t unanswered = 0;
  for (const QaExample& e : table.examples) unanswered += e.answer_texts.empty() ? 1 : 0;
  if (unanswered > 0 && !version_2)
    return str_format("%lld of %lld questions have no gold answer (SQuAD v1)", static_cast<long long>(unanswered),
                      static_cast<long long>(table.size()));
  return "";
}

class QuestionAnsweringSpec final : public TaskSpec {
 public:
  Task task() const override { return Task::kQuestionAnswering; }


  // (question, context) pairs
  at::Tensor shape_logits(const at::Tensor& logits, const Batch& batch) const override {
    // [B, L, 2] start and end logits, -inf at padding so that neither the
    // loss's softmax nor post-processing sees a padded position: the result
    // does not depend on the batch's longest feature, and packed equals
    // padded (docs/DESIGN.md, "Question answering").
    if (!batch.attention_mask.defined()) return logits;
    return logits.masked_fill(batch.attention_mask.eq(0).unsqueeze(-1), -std::numeric_limits<double>::infinity());
  }
  at::Tensor loss(const at::Tensor& logits, const at::Tensor& labels, const TaskLabels&) const override {
    // logits [B, L, 2], labels [B, 2]: the mean of the start and end
    // positions' cross-entropy, as <Family>ForQuestionAnswering computes it.
    const at::Tensor positions = labels.to(at::kLong);
    return (at::cross_entropy_loss(logits.select(2, 0), positions.select(1, 0)) +
            at::cross_entropy_loss(logits.select(2, 1), positions.select(1, 1))) /
           2;
  }

  TrainTables read_for_training(const RunConfig& config, const TaskLabels&) const override {
    const DataConfig& d = config.data;
    QaReadOptions options;
    options.allow_unanswered = d.version_2_with_negative;
    TrainTables t;
    QaTable train = read_qa_table(d.train_file, options);
    if (train.size() == 0) throw Error(d.train_file + ": no questions to train on");
    if (!d.eval_file.empty()) {
      QaTable eval = read_qa_table(d.eval_file, options);
      if (eval.size() == 0) throw Error(d.eval_file + ": no questions to evaluate");
      t.eval = table_of(std::move(eval), true);
    }
    t.train = table_of(std::move(train), true);
    t.labels.num_labels = 2;
    return t;
  }

  std::unique_ptr<TaskTable> read_for_predict(const std::string& path, const DataConfig& d, const TaskLabels&,
                                              LabelUse use) const override {
    if (d.format != FileFormat::kAuto && d.format != FileFormat::kJsonl)
      throw Error("data.format: question answering reads SQuAD JSON or HF's flattened JSON Lines (auto or jsonl)");
    if (d.on_bad_row != BadRowPolicy::kError)
      throw Error("data.on_bad_row skip: a question-answering file is read whole; a bad question is an error naming "
                  "it");
    if (!d.text_a.empty() || !d.text_b.empty() || !d.label.empty())
      throw Error("data.text_a / data.text_b / data.label do not apply to a question-answering model: the question, "
                  "context and answers are SQuAD's fields (id, question, context, answers)");
    if (d.max_length < 1)
      throw Error(str_format("data.max_length = %lld: a question-answering window needs a length (run_qa's is 384)",
                             static_cast<long long>(d.max_length)));
    rules().validate(ModelConfig(), d);
    QaReadOptions read;
    read.read_answers = use != LabelUse::kNone;
    read.answers_if_present = use == LabelUse::kIfPresent;
    read.allow_unanswered = use != LabelUse::kRequired || d.version_2_with_negative;
    QaTable questions = read_qa_table(path, read);
    if (questions.size() == 0) throw Error(path + ": no questions to predict");
    const std::string reason = use == LabelUse::kIfPresent ? unscored_reason(questions, d.version_2_with_negative) : "";
    const bool scored = use == LabelUse::kRequired || (use == LabelUse::kIfPresent && reason.empty());
    auto table = table_of(std::move(questions), scored);
    if (!reason.empty()) log_info("predict: answers not scored: %s", reason.c_str());
    return table;
  }

  bool file_has_labels(const std::string& path, const DataConfig& d) const override {
    QaReadOptions read;
    read.answers_if_present = true;
    read.allow_unanswered = true;
    return unscored_reason(read_qa_table(path, read), d.version_2_with_negative).empty();
  }

  TokenizedDataset build(const TaskTable& table, const Tokenizer& tokenizer, const BuildSettings& s,
                         MPI_Comm comm) const override {
    QaFeatureOptions options;
    options.max_length = static_cast<int>(s.data->max_length);
    options.doc_stride = static_cast<int>(s.data->doc_stride);
    options.with_offsets = s.for_eval;
    options.with_labels = table.has_labels;  // the answers' spans: the loss, and eval_loss
    TokenizedDataset features =
        build_qa_features(dynamic_cast<const QuestionsTable&>(table).rows, tokenizer, options, comm);
    log_info("%s: %lld questions -> %lld features (windows of %d tokens, stride %d)", table.path.c_str(),
             static_cast<long long>(table.size()), static_cast<long long>(features.size()), options.max_length,
             options.doc_stride);
    return features;
  }

  int64_t record_width(const TokenizedDataset&, const EvalSettings& s) const override {
    return qa_record_width(s.data->n_best_size);
  }
  RecordFn record(const TokenizedDataset&, const EvalSettings& s) const override {
    return qa_record(s.data->n_best_size);
  }
  std::map<std::string, double> metrics(const std::vector<float>& records, const TokenizedDataset& features,
                                        const TaskTable& table, const EvalSettings& s) const override {
    const QaTable& questions = dynamic_cast<const QuestionsTable&>(table).rows;
    const std::vector<QaAnswer> answers = postprocess_qa(questions, features, records, postprocess_options(*s.data));
    return scores(questions, features, answers, records, s);
  }
  std::optional<Baseline> baseline(const TaskTable&, const TokenizedDataset&, const TaskTable& eval,
                                   const TokenizedDataset&, const EvalSettings& s) const override {
    return first_sentence_baseline(dynamic_cast<const QuestionsTable&>(eval).rows,
                                   s.data->version_2_with_negative);
  }


  std::unique_ptr<TaskPredictions> predictions(const TaskTable& table, const TokenizedDataset& features,
                                               const std::vector<float>& records,
                                               const EvalSettings& s) const override {
    auto out = std::make_unique<QaPredictions>();
    out->table = dynamic_cast<const QuestionsTable&>(table).rows;
    out->version_2 = s.data->version_2_with_negative;
    out->num_features = features.size();
    out->answers = postprocess_qa(out->table, features, records, postprocess_options(*s.data));
    if (table.has_labels) out->metrics = scores(out->table, features, out->answers, records, s);
    return out;
  }

 private:
  // qa_metrics, with eval_loss (the features' mean loss) when the features
  // have span labels.
  static std::map<std::string, double> scores(const QaTable& questions, const TokenizedDataset& features,
                                              const std::vector<QaAnswer>& answers, const std::vector<float>& records,
                                              const EvalSettings& s) {
    std::map<std::string, double> metrics = qa_metrics(questions, answers, s.data->version_2_with_negative);
    if (!features.span_labels.empty()) {
      const int64_t width = qa_record_width(s.data->n_best_size);
      double loss = 0;
      for (int64_t f = 0; f < features.size(); ++f) loss += records[static_cast<size_t>(f * width + 2)];
      metrics["eval_loss"] = features.size() > 0 ? loss / static_cast<double>(features.size()) : 0.0;
    }
    return metrics;
  }
};

// {"id": value(q), ...} in question order (ids are unique: data/qa_data.h).
template <class F>
std::string id_map(const QaTable& table, F value) {
  nlohmann::ordered_json map = nlohmann::ordered_json::object();
  for (int64_t q = 0; q < table.size(); ++q) map[table.examples[static_cast<size_t>(q)].id] = value(q);
  return map.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace

std::string QaPredictions::json_line(int64_t question) const {
  const QaAnswer& a = answers[static_cast<size_t>(question)];
  const bool has_span = a.start_char >= 0;
  std::string out = tasks::json_line_start(question, table.line_numbers[static_cast<size_t>(question)]) + "\"id\":";
  out += nlohmann::json(table.examples[static_cast<size_t>(question)].id).dump();
  out += ",\"answer\":" + nlohmann::json(a.text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  out += ",\"start\":" + (has_span ? std::to_string(a.start_char) : std::string("null"));
  out += ",\"end\":" + (has_span ? std::to_string(a.end_char) : std::string("null"));
  out += ",\"score\":";
  tasks::append_json_float(out, a.score);
  out += ",\"probability\":";
  tasks::append_json_float(out, a.probability);
  if (version_2) {
    out += ",\"null_score\":";
    tasks::append_json_float(out, a.null_score);
    out += ",\"score_diff\":";
    tasks::append_json_float(out, a.score_diff);
  }
  out += '}';
  return out;
}

std::vector<std::pair<std::string, std::string>> QaPredictions::side_files() const {
  std::vector<std::pair<std::string, std::string>> files = {
      {"predictions.json", id_map(table, [&](int64_t q) { return answers[static_cast<size_t>(q)].text; })}};
  if (version_2)
    files.emplace_back("null_odds.json",
                       id_map(table, [&](int64_t q) { return answers[static_cast<size_t>(q)].score_diff; }));
  return files;
}

namespace tasks {
const TaskSpec& question_answering_spec() {
  static const QuestionAnsweringSpec spec;
  return spec;
}
}  // namespace tasks

}  // namespace shardtrain
