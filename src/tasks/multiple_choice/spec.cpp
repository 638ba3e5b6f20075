// Multiple choice's spec (tasks/multiple_choice.h).
#include <ATen/ATen.h>

#include <algorithm>
#include <memory>

#include "shardtrain/core/check.h"
#include "shardtrain/tasks/multiple_choice.h"
#include "tasks/task_common.h"

namespace shardtrain {
namespace {

// The rows as the task's table, labelled when the reader read labels.
std::unique_ptr<TableOf<MultipleChoiceTable>> labelled_table(MultipleChoiceTable rows) {
  const bool labelled = rows.labels.kind != LabelKind::kNone;
  return table_of(std::move(rows), labelled);
}

MultipleChoiceOptions read_options(const DataConfig& d) {
  MultipleChoiceOptions options;
  options.format = d.format;
  options.context_column = d.text_a;
  options.prefix_column = d.text_b;
  options.choice_columns = d.choices;
  options.label_column = d.label;
  options.preset = d.preset;
  options.on_bad_row = d.on_bad_row;
  return options;
}


class MultipleChoiceSpec final : public TaskSpec {
 public:
  Task task() const override { return Task::kMultipleChoice; }


  at::Tensor shape_logits(const at::Tensor& logits, const Batch& batch) const override {
    return logits.view({-1, batch.num_choices});  // [B * choices, 1] -> [B, choices]
  }
  at::Tensor loss(const at::Tensor& logits, const at::Tensor& labels, const TaskLabels&) const override {
    return at::cross_entropy_loss(logits, labels.view({-1}).to(at::kLong));  // logits [B, choices], labels [B]
  }

  TrainTables read_for_training(const RunConfig& config, const TaskLabels&) const override {
    const DataConfig& d = config.data;
    MultipleChoiceOptions options = read_options(d);
    TrainTables t;
    MultipleChoiceTable train = read_multiple_choice(d.train_file, options);
    tasks::warn_skipped_rows(d.train_file, train.num_bad_rows);
    if (train.size() == 0) throw Error(d.train_file + ": no rows to train on");
    if (!d.eval_file.empty()) {
      options.num_choices = train.num_choices;
      MultipleChoiceTable eval = read_multiple_choice(d.eval_file, options);
      tasks::warn_skipped_rows(d.eval_file, eval.num_bad_rows);
      if (eval.size() == 0) throw Error(d.eval_file + ": no rows to evaluate");
      t.eval = labelled_table(std::move(eval));
    }
    t.train = labelled_table(std::move(train));
    t.labels.num_labels = 0;  // the model's own (the head scores each choice with one logit)
    return t;
  }

  std::unique_ptr<TaskTable> read_for_predict(const std::string& path, const DataConfig& d, const TaskLabels&,
                                              LabelUse use) const override {
    const ChoiceColumns preset = preset_columns(d.preset);
    MultipleChoiceOptions read = read_options(d);
    if (read.context_column.empty()) read.context_column = preset.context;
    if (read.prefix_column.empty()) read.prefix_column = preset.prefix;
    if (read.choice_columns.empty()) read.choice_columns = preset.choices;
    if (use == LabelUse::kNone || (use == LabelUse::kIfPresent && !file_has_labels(path, d)))
      read.label_column.clear();
    if (read.context_column.empty())
      throw Error("data.text_a: the context column of a multiple-choice model (or data.preset swag / copa)");
    if (read.choice_columns.empty())
      throw Error("data.choices: the choice columns of a multiple-choice model, e.g. data.choices ending0,ending1 (or "
                  "one column holding a list; or data.preset swag / copa)");
    MultipleChoiceTable rows = read_multiple_choice(path, read);
    if (rows.size() == 0) throw Error(path + ": no rows to predict");
    return labelled_table(std::move(rows));
  }

  bool file_has_labels(const std::string& path, const DataConfig& d) const override {
    return !d.label.empty() && file_has_column(path, d.format, d.label);
  }

  TokenizedDataset build(const TaskTable& table, const Tokenizer& tokenizer, const BuildSettings& s,
                         MPI_Comm comm) const override {
    const int max_length = static_cast<int>(s.data->max_length > 0 ? s.data->max_length : s.model_max_length);
    return build_choice_dataset(dynamic_cast<const ChoicesTable&>(table).rows, tokenizer, max_length, comm);
  }

  int64_t record_width(const TokenizedDataset& data, const EvalSettings&) const override {
    return data.sequences_per_example;
  }
  RecordFn record(const TokenizedDataset&, const EvalSettings&) const override {
    return [](const at::Tensor& logits, const Batch&) { return logits; };
  }
  std::map<std::string, double> metrics(const std::vector<float>& records, const TokenizedDataset& data,
                                        const TaskTable&, const EvalSettings&) const override {
    return choice_metrics(records, data);
  }
  std::optional<Baseline> baseline(const TaskTable&, const TokenizedDataset&, const TaskTable&,
                                   const TokenizedDataset& eval_data, const EvalSettings&) const override {
    return chance_baseline(eval_data.sequences_per_example);
  }

  std::unique_ptr<TaskPredictions> predictions(const TaskTable& table, const TokenizedDataset& data,
                                               const std::vector<float>& records,
                                               const EvalSettings&) const override {
    auto out = std::make_unique<ChoicePredictions>();
    const int64_t c = data.sequences_per_example;
    ST_ASSERT(static_cast<int64_t>(records.size()) == table.size() * c,
              "predict: a multiple-choice model gave other than one logit per choice");
    out->num_choices = c;
    out->logits = records;
    out->line_numbers = table.line_numbers;
    out->predicted_ids.resize(static_cast<size_t>(table.size()));
    for (int64_t i = 0; i < table.size(); ++i) {
      const float* row = records.data() + i * c;
      out->predicted_ids[static_cast<size_t>(i)] = std::max_element(row, row + c) - row;
    }
    if (data.labels.kind == LabelKind::kClass) out->metrics = choice_metrics(records, data);
    return out;
  }
};

}  // namespace

std::string ChoicePredictions::json_line(int64_t row) const {
  std::string out = tasks::json_line_start(row, line_numbers[static_cast<size_t>(row)]) + "\"logits\":[";
  const float* values = logits.data() + row * num_choices;
  for (int64_t j = 0; j < num_choices; ++j) {
    if (j > 0) out += ',';
    tasks::append_json_float(out, values[j]);
  }
  out += str_format("],\"choice\":%lld}", static_cast<long long>(predicted_ids[static_cast<size_t>(row)]));
  return out;
}

namespace tasks {
const TaskSpec& multiple_choice_spec() {
  static const MultipleChoiceSpec spec;
  return spec;
}
}  // namespace tasks

}  // namespace shardtrain
