// Multiple choice's rules (tasks/task_rules.h): torch-free, for the config checks.
#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "shardtrain/core/check.h"
#include "shardtrain/core/limits.h"
#include "shardtrain/core/log.h"
#include "shardtrain/data/multiple_choice.h"
#include "shardtrain/tasks/task_rules.h"
#include "tasks/task_common.h"

namespace shardtrain {
namespace {

class MultipleChoiceRules final : public TaskRules {
 public:
  Task task() const override { return Task::kMultipleChoice; }

  std::vector<std::string> own_keys() const override { return {"data.choices", "data.preset"}; }
  void apply_defaults(DataConfig& d, const std::set<std::string>& keys_set) const override {
    if (d.preset == DataPreset::kNone) {
      // Not MRPC's "#1 String" / "Quality" of sequence classification: the
      // context has no usual name and must be given; the label column is
      // HF's "label" (run_swag's label_column_name, SWAG's and COPA's).
      tasks::fill_default(keys_set, "data.text_a", d.text_a, std::string());
      tasks::fill_default(keys_set, "data.text_b", d.text_b, std::string());
      tasks::fill_default(keys_set, "data.label", d.label, std::string("label"));
      return;
    }
    const ChoiceColumns preset = preset_columns(d.preset);
    tasks::fill_default(keys_set, "data.text_a", d.text_a, preset.context);
    tasks::fill_default(keys_set, "data.text_b", d.text_b, preset.prefix);
    tasks::fill_default(keys_set, "data.label", d.label, preset.label);
    tasks::fill_default(keys_set, "data.choices", d.choices, preset.choices);
  }
  void validate(const ModelConfig& m, const DataConfig& d) const override {
    tasks::refuse_conll(d);
    tasks::require_key(!d.text_a.empty(), "data.text_a: not set (the context column, the first text of every pair; "
                                          "or data.preset = \"swag\" / \"copa\")");
    tasks::require_key(!d.choices.empty(),
                       "data.choices: not set (the choice columns, e.g. [\"ending0\", \"ending1\"], or one column "
                       "holding a list; or data.preset = \"swag\" / \"copa\")");
    tasks::require_key(!d.label.empty(), "data.label: not set (the column with the index of the right choice)");
    tasks::require_key(m.num_labels == 0 || m.num_labels == 1 || m.num_labels == 2,
                       "model.num_labels = " + std::to_string(m.num_labels) +
                           ": a multiple-choice model scores each choice with one logit; leave model.num_labels out");
  }
  std::vector<std::string> eval_metric_names(int64_t, const DataConfig&) const override {
    return {"eval_loss", "eval_accuracy"};
  }
  const char* class_suffix() const override { return "ForMultipleChoice"; }
  std::vector<std::string> peft_head_modules() const override { return {"classifier"}; }
  int64_t head_outputs(int64_t) const override { return 1; }  // one logit per choice
  // (context, choice) pairs whatever data.text_b is.
  std::string second_text(const DataConfig& d) const override {
    return !d.text_b.empty() || d.choices.empty() ? d.text_b : d.choices.front();
  }
  int64_t sequences_per_row(const DataConfig& d) const override {
    return std::max<int64_t>(1, static_cast<int64_t>(d.choices.size()));
  }
};

}  // namespace

namespace tasks {
const TaskRules& multiple_choice_rules() {
  static const MultipleChoiceRules rules;
  return rules;
}
}  // namespace tasks

}  // namespace shardtrain
