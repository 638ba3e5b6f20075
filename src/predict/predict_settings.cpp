// predict's settings from its flags, a checkpoint's run, or its defaults
// (predict/predict_settings.h).
#include "shardtrain/predict/predict_settings.h"

#include <string>
#include <vector>

#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/data/reader.h"
#include "shardtrain/tasks/task_spec.h"

namespace shardtrain {
namespace {

// predict's flags for the data keys, in the order they are printed.
const std::pair<const char*, const char*> kDataFlags[] = {
    {"data.format", "--format"},       {"data.on_bad_row", "--on-bad-row"},
    {"data.preset", "--preset"},       {"data.text_a", "--text-a"},
    {"data.text_b", "--text-b"},       {"data.choices", "--choices"},
    {"data.label", "--label"},         {"data.max_length", "--max-length"},
    {"data.doc_stride", "--doc-stride"}, {"data.n_best_size", "--n-best-size"},
    {"data.max_answer_length", "--max-answer-length"},
    {"data.version_2_with_negative", "--version-2-with-negative"},
    {"data.null_score_diff_threshold", "--null-score-diff-threshold"},
};

std::string single_quoted(const std::string& text) { return "'" + text + "'"; }
std::string shown(const std::string& text) { return single_quoted(text); }
std::string shown(int64_t value) { return std::to_string(value); }
std::string shown(double value) { return str_format("%g", value); }
std::string shown(bool value) { return value ? "true" : "false"; }
std::string shown(FileFormat format) { return enum_name(format); }
std::string shown(BadRowPolicy policy) { return enum_name(policy); }
std::string shown(DataPreset preset) { return enum_name(preset); }
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

  // `field` from the run's `value` (the key `key`) unless its flag was given.
  template <class T>
  void take(const std::string& key, T& field, const T& value) {
    const std::string flag = predict_flag_of(key);
    if (!given(flag) && shown(value) == "''" && shown(field) == "''") return;  // an empty column, not used
    if (given(flag)) {
      add(flag, shown(field), "flag");
    } else if (run_) {
      field = value;
      add(flag, shown(field), "run: " + key);
    } else {
      add(flag, shown(field), "default");
    }
  }
  void add(const std::string& flag, const std::string& value, const std::string& origin) {
    settings_.push_back({flag, value, origin});
  }
  std::vector<PredictSetting>& settings() { return settings_; }
  const RunConfig* run() const { return run_; }
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
  if (!r.given("--format") && from_extension != FileFormat::kAuto && run.data.format != FileFormat::kAuto &&
      from_extension != run.data.format) {
    r.add("--format", shown(from_extension),
          std::string("the file's extension; the run's data.format was ") + enum_name(run.data.format));
    options.data.format = from_extension;
    return;
  }
  r.take("data.format", options.data.format, run.data.format);
}

// The labels (a column, or SQuAD's gold answers): read when a flag asks for
// them (--label, --with-answers), or, on a checkpoint, when the file has the
// run's; then the metrics are the run's evaluation's.
void resolve_labels(Resolver& r, const TaskSpec& spec, PredictOptions& options) {
  DataConfig& d = options.data;
  const RunConfig* run = r.run();
  if (r.given("--label") || r.given("--with-answers")) {
    options.labels = LabelUse::kRequired;
    r.add(r.given("--label") ? "--label" : "--with-answers", r.given("--label") ? shown(d.label) : "true", "flag");
    return;
  }
  if (!run) return;
  d.label = run->data.label;
  const std::string what = d.label.empty() ? "gold answers" : "the run's data.label " + single_quoted(d.label);
  if (spec.file_has_labels(options.data_path, d)) {
    options.labels = LabelUse::kRequired;
    r.add(d.label.empty() ? "--with-answers" : "--label", d.label.empty() ? "true" : shown(d.label),
          "run: " + (d.label.empty() ? std::string("the file has gold answers") : std::string("data.label")) +
              "; metrics as the run's evaluation");
    return;
  }
  r.add(d.label.empty() ? "--with-answers" : "--label", d.label.empty() ? "false" : "''",
        what + (d.label.empty() ? " are" : " is") + " not in the file: no metrics");
  d.label.clear();
}

// The columns; a preset given on the command line names its own columns, and
// the run's then give way to it.
void resolve_columns(Resolver& r, const TaskSpec& spec, PredictOptions& options) {
  DataConfig& d = options.data;
  const RunConfig* run = r.run();
  const DataConfig none = predict_data_defaults();
  const DataConfig& from = run ? run->data : none;
  const std::vector<std::string> own = spec.rules().own_keys();
  const bool with_preset = std::find(own.begin(), own.end(), "data.preset") != own.end();
  if (with_preset) {
    r.take("data.preset", d.preset, from.preset);
    if (r.given("--preset") && run && d.preset != run->data.preset) r.set_run(nullptr);
  }
  const DataConfig& columns = r.run() ? r.run()->data : none;
  r.take("data.text_a", d.text_a, columns.text_a);
  r.take("data.text_b", d.text_b, columns.text_b);
  if (std::find(own.begin(), own.end(), "data.choices") != own.end()) r.take("data.choices", d.choices, columns.choices);
  r.set_run(run);
  resolve_labels(r, spec, options);
  if (run && std::find(own.begin(), own.end(), "data.label_all_tokens") != own.end()) {
    d.label_all_tokens = run->data.label_all_tokens;
    if (d.label_all_tokens) r.add("(metrics)", "every sub-word token", "run: data.label_all_tokens = true");
  }
}

// A flag of a data key another task owns is refused, naming the task.
void refuse_other_tasks_flags(const TaskSpec& spec, const std::set<std::string>& given) {
  for (const Task other : all_tasks()) {
    if (other == spec.task()) continue;
    for (const std::string& key : task_rules(other).own_keys()) {
      const std::string flag = predict_flag_of(key);
      if (!flag.empty() && given.count(flag))
        throw Error(flag + ": only for a " + enum_name(other) + " model (this one is " + enum_name(spec.task()) + ")");
    }
  }
}

}  // namespace

std::string predict_flag_of(const std::string& key) {
  for (const auto& [data_key, flag] : kDataFlags)
    if (key == data_key) return flag;
  return "";
}

std::vector<PredictSetting> resolve_predict_settings(const RunConfig* run, Task task, const std::set<std::string>& given,
                                                     PredictOptions& options) {
  const TaskSpec& spec = task_spec(task);
  refuse_other_tasks_flags(spec, given);
  Resolver r(run, given);
  DataConfig& d = options.data;
  if (run) {
    resolve_format(r, *run, options);
    r.take("data.on_bad_row", d.on_bad_row, run->data.on_bad_row);
  } else if (r.given("--format")) {
    r.add("--format", shown(d.format), "flag");
  }
  resolve_columns(r, spec, options);
  if (!run && !r.given("--max-length")) {
    // run_qa's window for a question-answering folder.
    DataConfig defaults = predict_data_defaults();
    spec.rules().apply_defaults(defaults, {});
    d.max_length = defaults.max_length;
  }
  r.take("data.max_length", d.max_length, run ? run->data.max_length : d.max_length);
  const std::vector<std::string> own = spec.rules().own_keys();
  const DataConfig& from = run ? run->data : d;
  for (const std::string& key : own) {
    if (key == "data.doc_stride") r.take(key, d.doc_stride, from.doc_stride);
    if (key == "data.n_best_size") r.take(key, d.n_best_size, from.n_best_size);
    if (key == "data.max_answer_length") r.take(key, d.max_answer_length, from.max_answer_length);
    if (key == "data.version_2_with_negative") r.take(key, d.version_2_with_negative, from.version_2_with_negative);
    if (key == "data.null_score_diff_threshold")
      r.take(key, d.null_score_diff_threshold, from.null_score_diff_threshold);
  }
  const int64_t batch = options.batch_size;
  if (r.given("--batch-size")) r.add("--batch-size", shown(batch), "flag");
  else if (run) options.batch_size = run->train.eval_batch_size, r.add("--batch-size", shown(options.batch_size), "run: train.eval_batch_size");
  else r.add("--batch-size", shown(batch), "default");
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
