// Tasks (model.task), each behind one TaskSpec (docs/DESIGN.md, "Tasks").
//
// Everything that differs between sequence classification, token
// classification, multiple choice and extractive question answering lives in
// src/tasks/<task>/: its rules (tasks/task_rules.h: config keys, metric names,
// HF class, head shape) and its spec, reached through task_spec(task): how
// its files are read and tokenized, its logits' shape and its loss, its
// evaluation record and metrics, its baseline, and its predictions. The
// model's forward and loss, the training job, evaluation, predict, the config
// checks and the memory estimate ask them and switch on no task. Adding a
// task: its folder, its fixtures, one row in core/task_list.h (which makes
// its Task enumerator and model.task name); docs/code-tour.md has the list.
//
// A task's data flows the same way in `train` and `predict`:
//   read      the file, with the run's data keys (DataConfig), into the
//             task's TaskTable: rows, line numbers, labels against fixed names
//   build     tokenized across the ranks and gathered on every rank, in row
//             order (a TokenizedDataset)
//   record    each batch's logits -> one fixed-width record per example,
//             gathered exactly in input order (train/evaluate.h)
//   metrics   records -> the task's eval metrics; predict: records -> its
//             outputs per row (TaskPredictions: JSON lines, side files)
//
//   const TaskSpec& spec = task_spec(config.model.task);
//   TrainTables tables = spec.read_for_training(config, model_labels);
//   TokenizedDataset eval = spec.build(*tables.eval, tokenizer, settings, comm);
#pragma once

#include <ATen/core/Tensor.h>
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "shardtrain/core/run_config.h"
#include "shardtrain/data/collator.h"
#include "shardtrain/data/dataset.h"
#include "shardtrain/tasks/task_rules.h"

namespace shardtrain {

class Tokenizer;

// A data file as a task reads it: what every task's rows have; the task's own
// part (sentences of words, rows of choices, questions) is its subclass's.
class TaskTable {
 public:
  virtual ~TaskTable() = default;
  std::string path;
  std::vector<int64_t> line_numbers;  // per row: its 1-based line (SQuAD JSON: its question number)
  int64_t num_bad_rows = 0;           // rows skipped under data.on_bad_row = "skip"
  bool has_labels = false;            // the file's labels, tags or gold answers were read
  int64_t size() const { return static_cast<int64_t>(line_numbers.size()); }
};

// A task's table: the rows its data-layer reader gave (RawTable, WordTable,
// MultipleChoiceTable, QaTable), beside what every table has.
template <class Rows>
class TableOf : public TaskTable {
 public:
  Rows rows;
};

// `rows` as a task's table: its path, line numbers and skipped rows, and
// whether its labels were read.
template <class Rows>
std::unique_ptr<TableOf<Rows>> table_of(Rows rows, bool has_labels) {
  auto table = std::make_unique<TableOf<Rows>>();
  table->path = rows.path;
  table->line_numbers = rows.line_numbers;
  table->num_bad_rows = rows.num_bad_rows;
  table->has_labels = has_labels;
  table->rows = std::move(rows);
  return table;
}

// The labels of a model: what its head predicts.
struct TaskLabels {
  std::vector<std::string> names;  // id order (id2label); empty: integer labels as given
  int64_t num_labels = 0;          // the head's classes or tags; 0: the model's own (multiple choice)
  std::string problem_type;        // config.json's ("" = infer as HF does)
  // The names are the model's own, not HF's LABEL_<i>: a file's string labels
  // mean something through them.
  bool named = false;
  bool regression() const { return num_labels == 1 || problem_type == "regression"; }
};

// The training job's files, read, with the labels they settle.
struct TrainTables {
  std::unique_ptr<TaskTable> train;
  std::unique_ptr<TaskTable> eval;  // null without data.eval_file
  TaskLabels labels;                // what the head is built for
};

// Whether predict reads the file's labels (and scores the predictions).
enum class LabelUse {
  kNone,       // no labels
  kRequired,   // given on the command line: the file must have them
  kIfPresent,  // a checkpoint run's default: read where the file has them
};

// How a table is tokenized.
struct BuildSettings {
  const DataConfig* data = nullptr;  // max_length, doc_stride, label_all_tokens, ...
  std::string model_type;            // the model's config.json model_type (RoBERTa: run_ner's prefix space)
  bool for_eval = false;             // evaluation or predict: QA's offsets, token words' positions
  // The longest sequence the model takes: the length of data.max_length = 0
  // (predict's "no limit") for the tasks that always truncate.
  int64_t model_max_length = 0;
  // How the truncation warnings name the length: "data.max_length" (train)
  // or "--max-length" (predict).
  std::string max_length_name = "data.max_length";
};

// What evaluation and predict know besides the data.
struct EvalSettings {
  const DataConfig* data = nullptr;  // QA's post-processing keys
  TaskLabels labels;                 // the model's
};

// One batch's records: the task-shaped logits (TaskSpec::shape_logits) and
// the batch -> a CPU float tensor [examples, width].
using RecordFn = std::function<at::Tensor(const at::Tensor& logits, const Batch& batch)>;

// What a constant guess scores on the eval data (printed beside the model's
// metrics at the end of a run).
struct Baseline {
  std::string name;  // "majority class (1)", "every word O", "chance (1 in 4)"
  int64_t class_id = 0;
  std::map<std::string, double> metrics;
};

// predict's outputs: one JSON line per row, the metrics when the file had
// labels, and files beside the output (QA's predictions.json).
class TaskPredictions {
 public:
  virtual ~TaskPredictions() = default;
  // Row `row` as one JSON object, no newline (docs/commands.md, "predict").
  virtual std::string json_line(int64_t row) const = 0;
  // {file name, content} to write beside the output (e.g. "predictions.json").
  virtual std::vector<std::pair<std::string, std::string>> side_files() const { return {}; }
  std::map<std::string, double> metrics;  // with labels: evaluation's metrics, by its functions
  std::vector<std::string> notes;         // said after the run (truncated rows, answers not scored: why)
};

class TaskSpec {
 public:
  virtual ~TaskSpec() = default;
  virtual Task task() const = 0;
  const TaskRules& rules() const { return task_rules(task()); }

  // ---- the model's head (model/task_model.h) ----
  // The model's logits in the task's shape (multiple choice: [B, choices]).
  virtual at::Tensor shape_logits(const at::Tensor& logits, const Batch&) const { return logits; }
  // The training loss of float32 logits against the batch's labels, as the
  // HF class computes it.
  virtual at::Tensor loss(const at::Tensor& logits, const at::Tensor& labels, const TaskLabels& head) const = 0;

  // ---- data ----
  // data.train_file and data.eval_file, read; the labels settled from
  // model.num_labels, data.labels, `model_labels` (a pretrained folder's
  // named id2label) or the training data; the eval file read against them.
  virtual TrainTables read_for_training(const RunConfig& config, const TaskLabels& model_labels) const = 0;
  // predict's file, read with `data` against the model's labels.
  virtual std::unique_ptr<TaskTable> read_for_predict(const std::string& path, const DataConfig& data,
                                                      const TaskLabels& model, LabelUse labels) const = 0;
  // Whether the file at `path` holds the labels `data` names (predict's
  // label column from a run, used only where it is there).
  virtual bool file_has_labels(const std::string& path, const DataConfig& data) const = 0;
  // Collective over comm: the table tokenized across the ranks, on every rank.
  virtual TokenizedDataset build(const TaskTable& table, const Tokenizer& tokenizer, const BuildSettings& settings,
                                 MPI_Comm comm) const = 0;

  // ---- evaluation ----
  // Each example's record: its width and how a batch's logits make them.
  virtual int64_t record_width(const TokenizedDataset& data, const EvalSettings& settings) const = 0;
  virtual RecordFn record(const TokenizedDataset& data, const EvalSettings& settings) const = 0;
  // The eval metrics of gathered records (every example once, in order).
  virtual std::map<std::string, double> metrics(const std::vector<float>& records, const TokenizedDataset& data,
                                                const TaskTable& table, const EvalSettings& settings) const = 0;
  // What a constant guess scores on the eval data, when the task has one.
  virtual std::optional<Baseline> baseline(const TaskTable& train, const TokenizedDataset& train_data,
                                           const TaskTable& eval, const TokenizedDataset& eval_data,
                                           const EvalSettings& settings) const = 0;

  // ---- predict ----
  // The outputs of every row from its gathered records.
  virtual std::unique_ptr<TaskPredictions> predictions(const TaskTable& table, const TokenizedDataset& data,
                                                       const std::vector<float>& records,
                                                       const EvalSettings& settings) const = 0;
};

// The spec of `task` (src/tasks/task_spec.cpp).
const TaskSpec& task_spec(Task task);

}  // namespace shardtrain
