// Token classification's rules (tasks/task_rules.h): torch-free, for the config checks.
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

class TokenClassificationRules final : public TaskRules {
 public:
  Task task() const override { return Task::kTokenClassification; }

  std::vector<std::string> own_keys() const override { return {"data.labels", "data.label_all_tokens"}; }
  void apply_defaults(DataConfig& d, const std::set<std::string>& keys_set) const override {
    tasks::fill_default(keys_set, "data.text_a", d.text_a, std::string("tokens"));
    tasks::fill_default(keys_set, "data.text_b", d.text_b, std::string());
    tasks::fill_default(keys_set, "data.label", d.label, std::string("ner_tags"));
  }
  void validate(const ModelConfig& m, const DataConfig& d) const override {
    tasks::require_key(!d.text_a.empty(), "data.text_a: not set (the first text column)");
    tasks::require_key(!d.label.empty(), "data.label: not set (the tags column; HF datasets call it \"ner_tags\")");
    tasks::require_key(d.text_b.empty(), "data.text_b = " + tasks::single_quoted(d.text_b) +
                                             ": token classification tags the words of one text (data.text_a); leave "
                                             "data.text_b out");
    std::set<std::string> seen;
    for (const std::string& label : d.labels)
      tasks::require_key(seen.insert(label).second, "data.labels: " + tasks::single_quoted(label) + " is listed twice");
    tasks::require_key(d.labels.size() <= static_cast<size_t>(kMaxNumLabels),
                       "data.labels: more than the " + std::to_string(kMaxNumLabels) +
                           " labels a classifier may have");
    tasks::require_key(m.num_labels == 0 || d.labels.empty() || static_cast<size_t>(m.num_labels) == d.labels.size(),
                       "model.num_labels = " + std::to_string(m.num_labels) + " but data.labels lists " +
                           std::to_string(d.labels.size()) + " tags; leave model.num_labels out (0)");
  }
  std::vector<std::string> eval_metric_names(int64_t, const DataConfig&) const override {
    return {"eval_loss", "eval_precision", "eval_recall", "eval_f1", "eval_accuracy"};
  }
  bool is_data_dependent_metric(const std::string& name, int64_t, const DataConfig&) const override {
    // eval_<TYPE>_f1, per entity type of the data.
    return name.size() > std::string("eval__f1").size() && name.rfind("eval_", 0) == 0 &&
           name.compare(name.size() - 3, 3, "_f1") == 0;
  }
  std::string data_dependent_metrics_note(int64_t, const DataConfig&) const override {
    return ", and eval_<TYPE>_f1 for each entity type of the data";
  }
  const char* class_suffix() const override { return "ForTokenClassification"; }
  const char* peft_task_type() const override { return "TOKEN_CLS"; }
  bool head_on_tokens() const override { return true; }
  std::string second_text(const DataConfig&) const override { return ""; }
};

}  // namespace

namespace tasks {
const TaskRules& token_classification_rules() {
  static const TokenClassificationRules rules;
  return rules;
}
}  // namespace tasks

}  // namespace shardtrain
