// Extractive question answering's rules (tasks/task_rules.h): torch-free, for the config checks.
#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "shardtrain/core/check.h"
#include "shardtrain/core/limits.h"
#include "shardtrain/core/log.h"
#include "shardtrain/tasks/task_rules.h"
#include "tasks/task_common.h"

namespace shardtrain {

// The metric names qa_metrics gives (tasks/question_answering.h).
std::vector<std::string> qa_metric_names(bool version_2) {
  if (!version_2) return {"eval_loss", "eval_exact_match", "eval_f1"};
  return {"eval_loss", "eval_exact", "eval_f1", "eval_best_exact", "eval_best_f1"};
}

namespace {

class QuestionAnsweringRules final : public TaskRules {
 public:
  Task task() const override { return Task::kQuestionAnswering; }

  std::vector<std::string> own_keys() const override {
    return {"data.doc_stride", "data.version_2_with_negative", "data.n_best_size", "data.max_answer_length",
            "data.null_score_diff_threshold"};
  }
  void apply_defaults(DataConfig& d, const std::set<std::string>& keys_set) const override {
    // run_qa.py's max_seq_length; the question and context are fields of the
    // SQuAD file, not columns (data/qa_data.h).
    tasks::fill_default(keys_set, "data.max_length", d.max_length, int64_t{384});
    tasks::fill_default(keys_set, "data.text_a", d.text_a, std::string());
    tasks::fill_default(keys_set, "data.text_b", d.text_b, std::string());
    tasks::fill_default(keys_set, "data.label", d.label, std::string());
  }
  void validate(const ModelConfig& m, const DataConfig& d) const override {
    // apply_defaults empties them; a printed config lists them empty.
    for (const auto& [key, value] : {std::pair<const char*, const std::string*>{"data.text_a", &d.text_a},
                                     {"data.text_b", &d.text_b}, {"data.label", &d.label}})
      tasks::require_key(value->empty(), std::string(key) + " = " + tasks::single_quoted(*value) +
                                             " does not apply to question answering: the question, context and "
                                             "answers are SQuAD's fields (id, question, context, answers)");
    tasks::require_key(d.format == FileFormat::kAuto || d.format == FileFormat::kJsonl,
                       "data.format: question answering reads SQuAD JSON (.json) or HF's flattened JSON Lines (.jsonl)");
    tasks::require_key(d.doc_stride >= 0 && d.doc_stride < d.max_length,
                       str_format("data.doc_stride = %lld: must be in [0, data.max_length = %lld)",
                                  static_cast<long long>(d.doc_stride), static_cast<long long>(d.max_length)));
    tasks::require_key(d.n_best_size > 0, "data.n_best_size = " + std::to_string(d.n_best_size) + ": must be > 0");
    tasks::require_key(d.max_answer_length > 0,
                       "data.max_answer_length = " + std::to_string(d.max_answer_length) + ": must be > 0");
    tasks::require_key(std::isfinite(d.null_score_diff_threshold),
                       "data.null_score_diff_threshold: must be a finite number");
    tasks::require_key(m.num_labels == 0 || m.num_labels == 2,
                       "model.num_labels = " + std::to_string(m.num_labels) +
                           ": a question-answering head gives a start and an end logit per token; leave "
                           "model.num_labels out");
  }
  std::vector<std::string> eval_metric_names(int64_t, const DataConfig& d) const override {
    return qa_metric_names(d.version_2_with_negative);
  }
  bool is_data_dependent_metric(const std::string& name, int64_t, const DataConfig& d) const override {
    return d.version_2_with_negative && (name == "eval_HasAns_exact" || name == "eval_HasAns_f1" ||
                                         name == "eval_NoAns_exact" || name == "eval_NoAns_f1");
  }
  std::string data_dependent_metrics_note(int64_t, const DataConfig& d) const override {
    return d.version_2_with_negative ? ", and eval_HasAns_exact, eval_HasAns_f1, eval_NoAns_exact, eval_NoAns_f1 when "
                                       "the eval data holds such questions"
                                     : "";
  }
  std::string describe(int64_t, const DataConfig& d) const override {
    return std::string("model.task = \"question_answering\"") + (d.version_2_with_negative ? " with" : " without") +
           " data.version_2_with_negative";
  }
  const char* class_suffix() const override { return "ForQuestionAnswering"; }
  const char* peft_task_type() const override { return "QUESTION_ANS"; }
  std::vector<std::string> peft_head_modules() const override { return {"qa_outputs"}; }
  bool head_on_tokens() const override { return true; }
  int64_t head_outputs(int64_t) const override { return 2; }  // start and end logits
  std::string second_text(const DataConfig&) const override { return "context"; }  // (question, context) pairs
  std::vector<std::string> side_file_names(const DataConfig& d) const override {
    if (d.version_2_with_negative) return {"predictions.json", "null_odds.json"};
    return {"predictions.json"};
  }
};

}  // namespace

namespace tasks {
const TaskRules& question_answering_rules() {
  static const QuestionAnsweringRules rules;
  return rules;
}
}  // namespace tasks

}  // namespace shardtrain
