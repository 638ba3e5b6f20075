// Private to the tasks layer: the tasks, one row each. A row names the
// enumerator (core/enum_names.h's Task) and the task's folder under
// src/tasks/, whose rules.cpp defines tasks::<folder>_rules() (torch-free:
// tasks/task_rules.h) and spec.cpp tasks::<folder>_spec() (tasks/task_spec.h).
// task_rules.cpp and task_spec.cpp build their tables from this list.
#pragma once

#define SHARDTRAIN_TASKS(ROW)                               \
  ROW(kSequenceClassification, sequence_classification)     \
  ROW(kTokenClassification, token_classification)           \
  ROW(kMultipleChoice, multiple_choice)                     \
  ROW(kQuestionAnswering, question_answering)
