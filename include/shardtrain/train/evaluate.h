// Sharded evaluation, for `train`'s reports and for `predict` (docs/DESIGN.md,
// "Exact distributed evaluation"): each rank runs the model on its batches of
// an EvalPlan (Accelerate's even_batches) and turns each batch's logits into
// a fixed-width record per example (the task's: tasks/task_spec.h), and
// gather_for_metrics (data/sampler.h) puts every example's record together
// once, in input order, on every rank; the task's metrics are computed from
// those, in float64 where it matters.
//
//   EvalSettings settings{&config.data, labels};
//   std::map<std::string, double> metrics =
//       evaluate_task(model, eval_data, *eval_table, settings, 32, pad_id, device, comm);
#pragma once
#include <ATen/core/Tensor.h>
#include <mpi.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shardtrain/core/run_config.h"
#include "shardtrain/data/collator.h"
#include "shardtrain/data/dataset.h"
#include "shardtrain/tasks/task_spec.h"

namespace shardtrain {

class TaskModel;

// Collective over comm: `width` values per example of `data`, made by
// `record` from each batch's task-shaped logits, gathered in input order on
// every rank (each example once). The model runs in eval mode without
// autograd (its mode is restored afterwards); batches of `batch_size` rows per
// rank, padded with `pad_id`, moved to `device`. `rows`, when given, receives
// the row index of every gathered record, gathered the same way (0, 1, 2, ...:
// a check of the plan).
std::vector<float> sharded_records(TaskModel& model, const TokenizedDataset& data, int64_t batch_size,
                                   int32_t pad_id, const at::Device& device, MPI_Comm comm, int64_t width,
                                   const RecordFn& record, std::vector<int64_t>* rows = nullptr);

// The model's logits of every example ([examples x width], row-major,
// float32; the task's record width: num_labels, or one logit per choice),
// the same on every rank: sharded_records with the logits as the record.
std::vector<float> sharded_logits(TaskModel& model, const TokenizedDataset& data, int64_t batch_size,
                                  int32_t pad_id, const at::Device& device, MPI_Comm comm,
                                  std::vector<int64_t>* rows = nullptr);

// The labels the model's head is built for (its config's id2label,
// num_labels, problem_type), as the tasks take them.
TaskLabels model_labels(const TaskModel& model);

// Collective over comm: the task's records of `data` (built from `table`),
// gathered, and its eval metrics.
std::map<std::string, double> evaluate_task(TaskModel& model, const TokenizedDataset& data, const TaskTable& table,
                                            const EvalSettings& settings, int64_t batch_size, int32_t pad_id,
                                            const at::Device& device, MPI_Comm comm);

// Refuses (Error naming checkpoint.score_attribute and the allowed names) a
// score_attribute that no report of this task holds: with it, keep-best-N and
// early stopping would silently do nothing. "" is fine.
void check_score_attribute(const std::string& score_attribute, Task task, int64_t num_labels, const DataConfig& data,
                           bool with_eval);

}  // namespace shardtrain
