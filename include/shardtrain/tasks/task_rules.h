// What a task is (model.task), without tensors: its config keys and their
// rules, its metric names, its HF class and the shape of its head's output
// (docs/DESIGN.md, "Tasks"). The config checks, the HF config.json reader and
// the sweep's metric check ask these, and build without LibTorch (the fuzz
// targets compile them alone). What a task does with data and tensors is its
// TaskSpec (tasks/task_spec.h). Each task's rules and spec live in
// src/tasks/<task>/, and core/task_list.h lists the tasks once.
//
//   const TaskRules& rules = task_rules(config.model.task);
//   rules.apply_defaults(config.data, keys_set);
//   rules.validate(config.model, config.data);
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "shardtrain/core/run_config.h"

namespace shardtrain {

class TaskRules {
 public:
  virtual ~TaskRules() = default;
  virtual Task task() const = 0;

  // ---- config (core/run_config.h's DataConfig and ModelConfig) ----
  // The data keys only this task reads: under another task, one changed from
  // its default is refused naming the task it applies to.
  virtual std::vector<std::string> own_keys() const { return {}; }
  // Fills the data keys the user left out (not in keys_set) with the task's
  // defaults (run_ner's column names, run_qa's 384 tokens, a preset's columns).
  virtual void apply_defaults(DataConfig&, const std::set<std::string>& /*keys_set*/) const {}
  // Error naming the key for a data or model key the task cannot take.
  virtual void validate(const ModelConfig& model, const DataConfig& data) const = 0;
  // The eval metrics every report of the task holds (checkpoint.score_attribute,
  // sweep.metric); num_labels 0 when not known yet.
  virtual std::vector<std::string> eval_metric_names(int64_t num_labels, const DataConfig& data) const = 0;
  // Further names some reports hold, by their data (seqeval's per-type F1,
  // SQuAD v2's HasAns / NoAns, macro-F1 over more than two classes), and
  // how a message describes them (", and eval_<TYPE>_f1 for ...", or "").
  virtual bool is_data_dependent_metric(const std::string&, int64_t /*num_labels*/, const DataConfig&) const {
    return false;
  }
  virtual std::string data_dependent_metrics_note(int64_t /*num_labels*/, const DataConfig&) const { return ""; }
  // The task in a message: "model.task = \"token_classification\"", "a
  // 3-label classification task".
  virtual std::string describe(int64_t num_labels, const DataConfig& data) const;

  // ---- the model's head (model/task_model.h) ----
  // HF's class name after the family's prefix: "ForSequenceClassification".
  virtual const char* class_suffix() const = 0;
  // The head runs on every token ([B, L, C]) instead of a pooled sequence.
  virtual bool head_on_tokens() const { return false; }
  // The head's outputs per sequence (or token) for num_labels labels.
  virtual int64_t head_outputs(int64_t num_labels) const { return num_labels; }
  // The sequences one data row holds (multiple choice: its choices).
  virtual int64_t sequences_per_row(const DataConfig&) const { return 1; }
  // What the task puts second in a sequence (the column, or "context"), ""
  // when its sequences are single texts: whether the model must take the
  // token type of pairs (train/preflight.h).
  virtual std::string second_text(const DataConfig& data) const { return data.text_b; }

  // ---- LoRA (model/lora.h) ----
  // PEFT's task_type for the task ("SEQ_CLS"); nullptr where PEFT has none
  // (multiple choice: a plain PeftModel).
  virtual const char* peft_task_type() const { return nullptr; }
  // The head modules PEFT trains in full for the task type
  // (PeftModelFor<Task>'s modules_to_save), matched as PEFT matches them.
  virtual std::vector<std::string> peft_head_modules() const { return {"classifier", "score"}; }

  // ---- predict ----
  // The files predict writes beside its output (TaskPredictions::side_files),
  // known before the run so that their paths are checked first.
  virtual std::vector<std::string> side_file_names(const DataConfig&) const { return {}; }
};

// The rules of `task` (src/tasks/task_rules.cpp).
const TaskRules& task_rules(Task task);
// Every task, in core/task_list.h's order.
std::vector<Task> all_tasks();
// The task whose HF class names end in `class_name`'s suffix
// ("BertForTokenClassification" -> token classification); nullopt for any
// other class (BertForMaskedLM).
std::optional<Task> task_of_class(const std::string& class_name);

// Every metric a report of the task holds: train_loss, and with eval data
// the task's eval_metric_names.
std::vector<std::string> reported_metric_names(Task task, int64_t num_labels, const DataConfig& data, bool with_eval);
// Whether some report may hold `metric` (reported_metric_names, or a
// data-dependent name).
bool metric_may_be_reported(const std::string& metric, Task task, int64_t num_labels, const DataConfig& data,
                            bool with_eval);

}  // namespace shardtrain
