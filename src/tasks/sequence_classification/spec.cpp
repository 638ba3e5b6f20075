// Sequence classification's spec (tasks/sequence_classification.h).
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <memory>

#include "shardtrain/core/check.h"
#include "shardtrain/data/tokenizer.h"
#include "shardtrain/tasks/sequence_classification.h"
#include "tasks/task_common.h"

namespace shardtrain {
namespace {

// The rows as the task's table, labelled when the reader read labels.
std::unique_ptr<TableOf<RawTable>> labelled_table(RawTable rows) {
  const bool labelled = rows.labels.kind != LabelKind::kNone;
  return table_of(std::move(rows), labelled);
}

ReaderOptions reader_options(const DataConfig& d, LabelMode mode) {
  ReaderOptions r;
  r.format = d.format;
  r.text_a = d.text_a;
  r.text_b = d.text_b;
  r.label = d.label;
  r.label_mode = mode;
  r.on_bad_row = d.on_bad_row;
  return r;
}


// The file's labels as the model's class ids. Integer labels are ids already;
// string labels only mean something through the model's id2label, never
// through the reader's sorted order (a file missing one class would shift
// every id).
void to_model_ids(RawTable& table, const TaskLabels& model) {
  Labels& labels = table.labels;
  if (labels.kind != LabelKind::kClass) return;
  std::map<std::string, int64_t> by_name;
  for (size_t i = 0; i < model.names.size(); ++i) by_name[model.names[i]] = static_cast<int64_t>(i);
  for (size_t row = 0; row < labels.class_ids.size(); ++row) {
    int64_t& id = labels.class_ids[row];
    const std::string where = str_format("%s:%lld", table.path.c_str(), static_cast<long long>(table.line_numbers[row]));
    if (labels.names.empty()) {
      if (id >= model.num_labels)
        throw Error(str_format("%s: label %lld, but the model has %lld labels (0..%lld)", where.c_str(),
                               static_cast<long long>(id), static_cast<long long>(model.num_labels),
                               static_cast<long long>(model.num_labels - 1)));
      continue;
    }
    const std::string& name = labels.names[static_cast<size_t>(id)];
    const auto found = by_name.find(name);
    if (found == by_name.end()) {
      std::string known;
      for (const auto& n : model.names) known += (known.empty() ? "'" : ", '") + n + "'";
      throw Error(where + ": label '" + name + "' is not one of the model's labels (id2label in config.json: " +
                  known + ")");
    }
    id = found->second;
  }
  labels.names.clear();  // the ids are the model's now
}

class SequenceClassificationSpec final : public TaskSpec {
 public:
  Task task() const override { return Task::kSequenceClassification; }





  at::Tensor loss(const at::Tensor& logits, const at::Tensor& labels, const TaskLabels& head) const override {
    std::string problem = head.problem_type;
    if (problem.empty()) {
      if (head.num_labels == 1)
        problem = "regression";
      else if (labels.scalar_type() == at::kLong || labels.scalar_type() == at::kInt)
        problem = "single_label_classification";
      else
        problem = "multi_label_classification";
    }
    if (problem == "regression") {
      if (head.num_labels == 1) return at::mse_loss(logits.squeeze(), labels.squeeze().to(logits.scalar_type()));
      return at::mse_loss(logits, labels.to(logits.scalar_type()));
    }
    if (problem == "single_label_classification")
      return at::cross_entropy_loss(logits.view({-1, head.num_labels}), labels.view({-1}).to(at::kLong));
    return at::binary_cross_entropy_with_logits(logits, labels.to(logits.scalar_type()));
  }

  TrainTables read_for_training(const RunConfig& config, const TaskLabels&) const override {
    const DataConfig& d = config.data;
    const int64_t model_num_labels = config.model.num_labels;
    const bool regression = model_num_labels == 1;
    const LabelMode label_mode = regression ? LabelMode::kRegression : LabelMode::kAuto;
    // Integer labels: below model.num_labels, or (0) exactly the ids 0..K-1 of
    // the training data; the eval data never adds classes (data/reader.h).
    ReaderOptions train_options = reader_options(d, label_mode);
    train_options.num_classes = model_num_labels > 1 ? model_num_labels : kInferClasses;
    TrainTables t;
    RawTable train = read_table(d.train_file, train_options);
    if (train.labels.kind == LabelKind::kNone) throw Error("data.label: the training data needs a label column");
    tasks::warn_skipped_rows(d.train_file, train.num_bad_rows);
    t.labels.num_labels = model_num_labels > 0 ? model_num_labels : std::max<int64_t>(train.labels.num_classes(), 2);
    t.labels.names = train.labels.names;
    if (!d.eval_file.empty()) {
      ReaderOptions r = reader_options(d, label_mode);
      r.label_names = train.labels.names;
      r.num_classes = regression ? 0 : t.labels.num_labels;
      r.class_source = model_num_labels > 0 ? "model.num_labels" : "the training data (" + d.train_file + ")";
      RawTable eval = read_table(d.eval_file, r);
      if (eval.size() == 0) throw Error(d.eval_file + ": no rows to evaluate");
      tasks::warn_skipped_rows(d.eval_file, eval.num_bad_rows);
      t.eval = labelled_table(std::move(eval));
    }
    t.train = labelled_table(std::move(train));
    return t;
  }

  std::unique_ptr<TaskTable> read_for_predict(const std::string& path, const DataConfig& d, const TaskLabels& model,
                                              LabelUse use) const override {
    if (d.text_a.empty())
      throw Error("data.text_a: the text column of a sequence classifier (a header name, JSON key or 0-based index)");
    ReaderOptions reader = reader_options(d, model.regression() ? LabelMode::kRegression : LabelMode::kAuto);
    if (use == LabelUse::kNone || (use == LabelUse::kIfPresent && !file_has_labels(path, d))) reader.label.clear();
    RawTable raw = read_table(path, reader);
    if (raw.size() == 0) throw Error(path + ": no rows to predict");
    to_model_ids(raw, model);
    return labelled_table(std::move(raw));
  }

  bool file_has_labels(const std::string& path, const DataConfig& d) const override {
    return !d.label.empty() && file_has_column(path, d.format, d.label);
  }

  TokenizedDataset build(const TaskTable& table, const Tokenizer& tokenizer, const BuildSettings& s,
                         MPI_Comm comm) const override {
    const RawTable& raw = dynamic_cast<const TextTable&>(table).rows;
    return build_dataset(raw, make_encoder(tokenizer, static_cast<int>(s.data->max_length)), comm, BuildOptions{});
  }

  int64_t record_width(const TokenizedDataset&, const EvalSettings& s) const override { return s.labels.num_labels; }
  RecordFn record(const TokenizedDataset&, const EvalSettings&) const override {
    return [](const at::Tensor& logits, const Batch&) { return logits; };
  }
  std::map<std::string, double> metrics(const std::vector<float>& records, const TokenizedDataset& data,
                                        const TaskTable&, const EvalSettings& s) const override {
    return eval_metrics(records, data.labels, s.labels.num_labels);
  }
  std::optional<Baseline> baseline(const TaskTable&, const TokenizedDataset& train_data, const TaskTable&,
                                   const TokenizedDataset& eval_data, const EvalSettings& s) const override {
    if (s.labels.num_labels < 2 || train_data.labels.kind != LabelKind::kClass) return std::nullopt;
    return majority_baseline(train_data.labels, eval_data.labels, s.labels.num_labels);
  }

  std::unique_ptr<TaskPredictions> predictions(const TaskTable& table, const TokenizedDataset& data,
                                               const std::vector<float>& records,
                                               const EvalSettings& s) const override {
    auto out = std::make_unique<ClassPredictions>();
    const int64_t c = s.labels.num_labels;
    out->num_labels = c;
    out->regression = s.labels.regression();
    out->logits = records;
    out->line_numbers = table.line_numbers;
    out->labels = data.labels;
    if (!out->regression && s.labels.named) out->label_names = s.labels.names;
    if (!out->regression) {
      out->predicted_ids.resize(static_cast<size_t>(table.size()));
      for (int64_t i = 0; i < table.size(); ++i) {
        const float* row = records.data() + i * c;
        out->predicted_ids[static_cast<size_t>(i)] = std::max_element(row, row + c) - row;  // torch.argmax's first
      }
    }
    if (data.labels.kind != LabelKind::kNone) out->metrics = eval_metrics(records, data.labels, c);
    return out;
  }
};

}  // namespace

std::string ClassPredictions::json_line(int64_t row) const {
  std::string out = tasks::json_line_start(row, line_numbers[static_cast<size_t>(row)]) + "\"logits\":[";
  const float* values = logits.data() + row * num_labels;
  for (int64_t j = 0; j < num_labels; ++j) {
    if (j > 0) out += ',';
    tasks::append_json_float(out, values[j]);
  }
  out += ']';
  if (regression) {
    out += ",\"prediction\":";
    tasks::append_json_float(out, values[0]);
  } else {
    const int64_t id = predicted_ids[static_cast<size_t>(row)];
    out += str_format(",\"label\":%lld", static_cast<long long>(id));
    if (!label_names.empty()) out += ",\"label_name\":" + nlohmann::json(label_names[static_cast<size_t>(id)]).dump();
  }
  out += '}';
  return out;
}

namespace tasks {
const TaskSpec& sequence_classification_spec() {
  static const SequenceClassificationSpec spec;
  return spec;
}
}  // namespace tasks

}  // namespace shardtrain
