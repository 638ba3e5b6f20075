// The tasks, one row each (docs/DESIGN.md, "Tasks"). A row names the
// enumerator of Task (core/enum_names.h; its model.task name is the folder's)
// and the task's folder under src/tasks/, whose rules.cpp defines
// tasks::<folder>_rules() (torch-free: tasks/task_rules.h) and spec.cpp
// tasks::<folder>_spec() (tasks/task_spec.h). The Task enum, its names and the
// tasks' tables are built from this list: a new task is its folder and one row
// here.
#pragma once

#define SHARDTRAIN_TASKS(ROW)                               \
  ROW(kSequenceClassification, sequence_classification)     \
  ROW(kTokenClassification, token_classification)           \
  ROW(kMultipleChoice, multiple_choice)                     \
  ROW(kQuestionAnswering, question_answering)
