// predict's settings from its flags, a checkpoint's run, or its defaults
// (cli/predict_settings.h).
#include "shardtrain/cli/predict_settings.h"

#include <string>
#include <vector>

#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/data/reader.h"
#include "shardtrain/data/word_table.h"

namespace shardtrain {
namespace {

std::string single_quoted(const std::string& text) { return "'" + text + "'"; }
std::string shown(const std::string& text) { return single_quoted(text); }
std::string shown(int value) { return std::to_string(value); }
std::string shown(int64_t value) { return std::to_string(value); }
std::string shown(double value) { return str_format("%g", value); }
std::string shown(bool value) { return value ? "true" : "false"; }
std::string shown(FileFormat format) { return choice_name(format); }
std::string shown(BadRowPolicy policy) { return choice_name(policy); }
std::string shown(DataPreset preset) { return choice_name(preset); }
std::string shown(const std::vector<std::string>& list) {
  std::string out;
  for (const std::string& item : list) out += (out.empty() ? "" : ",") + item;
  return single_quoted(out);
}

// Where each setting comes from: the flag when given, else the run's value
// when there is a run, else the default already in the field.
class Resolver {
 public:
  Resolver(const RunConfig* run, const std::set<std::string>& given) : run_(run), given_(given) {}

  bool given(const std::string& flag) const { return given_.count(flag) > 0; }

  // `field` from the run's `value` (named `key`) unless the flag was given.
  template <class Field, class Value>
  void take(const std::string& flag, Field& field, const Value& value, const std::string& key) {
    if (given(flag)) {
      add(flag, shown(field), "flag");
    } else if (run_) {
      field = static_cast<Field>(value);
      add(flag, shown(field), "run: " + key);
    } else {
      add(flag, shown(field), "default");
    }
  }
  void add(const std::string& flag, const std::string& value, const std::string& origin) {
    settings_.push_back({flag, value, origin});
  }
  std::vector<PredictSetting>& settings() { return settings_; }
  // The settings after this one come from `run` (null: none).
  void set_run(const RunConfig* run) { run_ = run; }

 private:
  const RunConfig* run_;
  const std::set<std::string>& given_;
  std::vector<PredictSetting> settings_;
};

// The run's format, unless the file's extension names another one.
void resolve_format(Resolver& r, const RunConfig& run, PredictOptions& options) {
  FileFormat from_extension = FileFormat::kAuto;
  try {
    from_extension = format_from_extension(options.data_path);
  } catch (const Error&) {
    // No telling extension: the run's format it is.
  }
  if (from_extension != FileFormat::kAuto && run.data.format != FileFormat::kAuto &&
      from_extension != run.data.format) {
    r.add("--format", shown(from_extension),
          std::string("the file's extension; the run's data.format was ") + choice_name(run.data.format));
    options.format = from_extension;
    return;
  }
  r.take("--format", options.format, run.data.format, "data.format");
}

// The run's label column is read only where the file has it.
void resolve_label(Resolver& r, const RunConfig* run, Task task, PredictOptions& options) {
  if (r.given("--label") || !run || run->data.label.empty()) {
    if (r.given("--label") || !options.label.empty()) r.add("--label", shown(options.label), r.given("--label") ? "flag" : "default");
    return;
  }
  options.label = run->data.label;
  bool present = false;
  if (task == Task::kTokenClassification) {
    WordTableOptions read;
    read.format = options.format;
    if (!options.text_a.empty()) read.words_column = options.text_a;
    read.tags_column = options.label;
    present = word_table_has_tags(options.data_path, read);
  } else {
    present = file_has_column(options.data_path, options.format, options.label);
  }
  if (present) {
    r.add("--label", shown(options.label), "run: data.label; metrics as the run's evaluation");
    return;
  }
  r.add("--label", "''", "the run's data.label " + single_quoted(run->data.label) + " is not in the file: no metrics");
  options.label.clear();
}

void resolve_columns(Resolver& r, const RunConfig* run, Task task, PredictOptions& options) {
  const RunConfig* run_of_job = run;
  if (task == Task::kQuestionAnswering) return;  // SQuAD's fields (id, question, context, answers)
  const DataConfig none;
  const DataConfig& data = run ? run->data : none;
  if (task == Task::kMultipleChoice) {
    r.take("--preset", options.preset, data.preset, "data.preset");
    // A preset given on the command line names its own columns: the run's
    // columns give way to it.
    if (r.given("--preset") && run && options.preset != run->data.preset) run = nullptr;
  }
  r.set_run(run);
  r.take("--text-a", options.text_a, data.text_a, "data.text_a");
  if (task != Task::kTokenClassification) r.take("--text-b", options.text_b, data.text_b, "data.text_b");
  if (task == Task::kMultipleChoice) r.take("--choices", options.choices, data.choices, "data.choices");
  resolve_label(r, run, task, options);
  if (task == Task::kTokenClassification && run) {
    options.label_all_tokens = run->data.label_all_tokens;
    if (options.label_all_tokens) r.add("(metrics)", "every sub-word token", "run: data.label_all_tokens = true");
  }
  r.set_run(run_of_job);
}

void resolve_qa(Resolver& r, const RunConfig* run, QaPredictOptions& qa) {
  const DataConfig none;
  const DataConfig& d = run ? run->data : none;
  int doc_stride = qa.doc_stride;
  r.take("--doc-stride", doc_stride, d.doc_stride, "data.doc_stride");
  qa.doc_stride = doc_stride;
  r.take("--n-best-size", qa.postprocess.n_best_size, d.n_best_size, "data.n_best_size");
  r.take("--max-answer-length", qa.postprocess.max_answer_length, d.max_answer_length, "data.max_answer_length");
  r.take("--version-2-with-negative", qa.postprocess.version_2_with_negative, d.version_2_with_negative,
         "data.version_2_with_negative");
  r.take("--null-score-diff-threshold", qa.postprocess.null_score_diff_threshold, d.null_score_diff_threshold,
         "data.null_score_diff_threshold");
  if (r.given("--with-answers")) {
    r.add("--with-answers", "true", "flag");
  } else if (run) {
    qa.answers_if_present = true;
    r.add("--with-answers", "if every question has answers", "run: it scored its eval file");
  }
}

}  // namespace

std::vector<PredictSetting> resolve_predict_settings(const RunConfig* run, Task task, const std::set<std::string>& given,
                                                     PredictOptions& options, QaPredictOptions& qa) {
  Resolver r(run, given);
  if (run && task != Task::kQuestionAnswering) {
    resolve_format(r, *run, options);
    r.take("--on-bad-row", options.on_bad_row, run->data.on_bad_row, "data.on_bad_row");
  } else if (r.given("--format")) {
    r.add("--format", shown(options.format), "flag");
  }
  resolve_columns(r, run, task, options);
  if (!run && !r.given("--max-length") && task == Task::kQuestionAnswering) options.max_length = kQaDefaultMaxLength;
  r.take("--max-length", options.max_length, run ? run->data.max_length : options.max_length, "data.max_length");
  if (task == Task::kQuestionAnswering) resolve_qa(r, run, qa);
  r.take("--batch-size", options.batch_size, run ? run->train.eval_batch_size : options.batch_size,
         "train.eval_batch_size");
  if (run) {
    options.unpadded = run->model.unpadded;
    r.add("(forward)", options.unpadded ? "packed" : "padded", "run: model.unpadded");
    if (!r.given("--dtype") && run->train.mixed_precision == Precision::kBf16) {
      options.dtype = at::kBFloat16;
      r.add("--dtype", "bfloat16", "run: train.mixed_precision = bf16");
    }
  }
  return std::move(r.settings());
}

std::string describe_predict_settings(const std::vector<PredictSetting>& settings) {
  std::string out;
  for (const PredictSetting& s : settings)
    out += (out.empty() ? "" : ", ") + s.flag + " " + s.value + " (" + s.origin + ")";
  return out;
}

}  // namespace shardtrain
