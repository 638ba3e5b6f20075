// Sequence classification's rules (tasks/task_rules.h): torch-free, for the config checks.
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
namespace {

class SequenceClassificationRules final : public TaskRules {
 public:
  Task task() const override { return Task::kSequenceClassification; }

  void validate(const ModelConfig&, const DataConfig& d) const override {
    tasks::refuse_conll(d);
    tasks::require_key(!d.text_a.empty(), "data.text_a: not set (the first text column)");
  }
  std::vector<std::string> eval_metric_names(int64_t num_labels, const DataConfig&) const override {
    if (num_labels == 1) return {"eval_loss", "eval_mse", "eval_pearson"};
    std::vector<std::string> names = {"eval_loss", "eval_accuracy", "eval_f1", "eval_mcc"};
    if (num_labels > 2) names.push_back("eval_macro_f1");
    return names;
  }
  bool is_data_dependent_metric(const std::string& name, int64_t num_labels, const DataConfig&) const override {
    return num_labels == 0 && name == "eval_macro_f1";
  }
  std::string data_dependent_metrics_note(int64_t num_labels, const DataConfig&) const override {
    return num_labels == 0 ? ", and eval_macro_f1 when the data has more than two classes" : "";
  }
  std::string describe(int64_t num_labels, const DataConfig&) const override {
    return num_labels == 1 ? std::string("a regression task (model.num_labels = 1)")
                           : str_format("a %lld-label classification task", static_cast<long long>(num_labels));
  }
  const char* class_suffix() const override { return "ForSequenceClassification"; }
  const char* peft_task_type() const override { return "SEQ_CLS"; }
};

}  // namespace

namespace tasks {
const TaskRules& sequence_classification_rules() {
  static const SequenceClassificationRules rules;
  return rules;
}
}  // namespace tasks

}  // namespace shardtrain
