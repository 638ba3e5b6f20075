// The table of the tasks' specs (tasks/task_spec.h), from core/task_list.h.
#include "shardtrain/tasks/task_spec.h"

#include "shardtrain/core/check.h"
#include "shardtrain/core/task_list.h"

namespace shardtrain {
namespace tasks {
#define ST_DECLARE_SPEC(task, folder) const TaskSpec& folder##_spec();
SHARDTRAIN_TASKS(ST_DECLARE_SPEC)
#undef ST_DECLARE_SPEC
}  // namespace tasks

const TaskSpec& task_spec(Task task) {
  switch (task) {
#define ST_SPEC_CASE(enumerator, folder) \
  case Task::enumerator:                 \
    return tasks::folder##_spec();
    SHARDTRAIN_TASKS(ST_SPEC_CASE)
#undef ST_SPEC_CASE
  }
  throw Error(std::string("no spec for model.task = \"") + enum_name(task) + "\" (core/task_list.h)");
}

}  // namespace shardtrain
