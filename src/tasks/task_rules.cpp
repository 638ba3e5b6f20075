// The table of the tasks' rules (tasks/task_rules.h), from core/task_list.h.
#include "shardtrain/tasks/task_rules.h"

#include <algorithm>

#include "shardtrain/core/check.h"
#include "shardtrain/core/task_list.h"

namespace shardtrain {
namespace tasks {
#define ST_DECLARE_RULES(task, folder) const TaskRules& folder##_rules();
SHARDTRAIN_TASKS(ST_DECLARE_RULES)
#undef ST_DECLARE_RULES
}  // namespace tasks

namespace {

struct RulesRow {
  Task task;
  const TaskRules& (*rules)();
};

const RulesRow kRules[] = {
#define ST_RULES_ROW(task, folder) {Task::task, tasks::folder##_rules},
    SHARDTRAIN_TASKS(ST_RULES_ROW)
#undef ST_RULES_ROW
};

}  // namespace

const TaskRules& task_rules(Task task) {
  for (const RulesRow& row : kRules)
    if (row.task == task) return row.rules();
  throw Error(std::string("no rules for model.task = \"") + enum_name(task) + "\" (core/task_list.h)");
}

std::vector<Task> all_tasks() {
  std::vector<Task> tasks;
  for (const RulesRow& row : kRules) tasks.push_back(row.task);
  return tasks;
}

std::optional<Task> task_of_class(const std::string& class_name) {
  for (const RulesRow& row : kRules) {
    const std::string suffix = row.rules().class_suffix();
    if (class_name.size() > suffix.size() &&
        class_name.compare(class_name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return row.task;
  }
  return std::nullopt;
}

std::string TaskRules::describe(int64_t, const DataConfig&) const {
  return std::string("model.task = \"") + enum_name(task()) + "\"";
}

std::vector<std::string> reported_metric_names(Task task, int64_t num_labels, const DataConfig& data, bool with_eval) {
  std::vector<std::string> names = {"train_loss"};
  if (!with_eval) return names;
  for (const std::string& name : task_rules(task).eval_metric_names(num_labels, data)) names.push_back(name);
  return names;
}

bool metric_may_be_reported(const std::string& metric, Task task, int64_t num_labels, const DataConfig& data,
                            bool with_eval) {
  const std::vector<std::string> names = reported_metric_names(task, num_labels, data, with_eval);
  if (std::find(names.begin(), names.end(), metric) != names.end()) return true;
  return with_eval && task_rules(task).is_data_dependent_metric(metric, num_labels, data);
}

}  // namespace shardtrain
