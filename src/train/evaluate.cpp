#include "shardtrain/train/evaluate.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/data/collator.h"
#include "shardtrain/data/sampler.h"
#include "shardtrain/model/task_model.h"

namespace shardtrain {

std::vector<float> sharded_records(TaskModel& model, const TokenizedDataset& data, int64_t batch_size,
                                   int32_t pad_id, const at::Device& device, MPI_Comm comm, int64_t width,
                                   const RecordFn& record, std::vector<int64_t>* rows) {
  int rank = 0, world = 1;
  ST_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  ST_CHECK_MPI(MPI_Comm_size(comm, &world));
  const EvalPlan plan = make_eval_plan(data.size(), batch_size, world);
  std::vector<float> local;
  std::vector<int64_t> local_rows;
  local.reserve(static_cast<size_t>(plan.per_rank_count() * width));
  const bool was_training = model.is_training();
  model.eval();
  {
    at::NoGradGuard no_grad;
    for (int64_t k = 0; k < plan.num_batches; ++k) {
      const std::vector<int64_t> indices = eval_batch(plan, rank, k);
      const Batch batch = to_device(collate(data, indices, pad_id), device);
      const at::Tensor values = record(model.forward_batch(batch), batch).to(at::kCPU, at::kFloat).contiguous();
      ST_ASSERT(values.dim() == 2 && values.size(0) == static_cast<int64_t>(indices.size()) && values.size(1) == width,
                "sharded_records: unexpected record shape");
      local.insert(local.end(), values.data_ptr<float>(), values.data_ptr<float>() + values.numel());
      local_rows.insert(local_rows.end(), indices.begin(), indices.end());
    }
  }
  model.train(was_training);
  if (rows) *rows = gather_for_metrics(local_rows, plan, comm, 1);
  return gather_for_metrics(local, plan, comm, width);
}

TaskLabels model_labels(const TaskModel& model) {
  const EncoderConfig& config = model.config();
  TaskLabels labels;
  labels.names = config.id2label;
  labels.num_labels = config.num_labels;
  labels.problem_type = config.problem_type;
  labels.named = config.has_label_names();
  return labels;
}

std::vector<float> sharded_logits(TaskModel& model, const TokenizedDataset& data, int64_t batch_size,
                                  int32_t pad_id, const at::Device& device, MPI_Comm comm,
                                  std::vector<int64_t>* rows) {
  const TaskSpec& spec = task_spec(model.config().task);
  const EvalSettings settings{nullptr, model_labels(model)};
  return sharded_records(model, data, batch_size, pad_id, device, comm, spec.record_width(data, settings),
                         [](const at::Tensor& logits, const Batch&) { return logits; }, rows);
}

std::map<std::string, double> evaluate_task(TaskModel& model, const TokenizedDataset& data, const TaskTable& table,
                                            const EvalSettings& settings, int64_t batch_size, int32_t pad_id,
                                            const at::Device& device, MPI_Comm comm) {
  const TaskSpec& spec = task_spec(model.config().task);
  const std::vector<float> records = sharded_records(model, data, batch_size, pad_id, device, comm,
                                                     spec.record_width(data, settings), spec.record(data, settings));
  return spec.metrics(records, data, table, settings);
}

void check_score_attribute(const std::string& score_attribute, Task task, int64_t num_labels, const DataConfig& data,
                           bool with_eval) {
  if (score_attribute.empty() || metric_may_be_reported(score_attribute, task, num_labels, data, with_eval)) return;
  std::string list;
  for (const std::string& name : reported_metric_names(task, num_labels, data, with_eval))
    list += (list.empty() ? "\"" : ", \"") + name + "\"";
  throw Error("checkpoint.score_attribute = \"" + score_attribute + "\" is never reported by " +
              task_rules(task).describe(num_labels, data) +
              (with_eval ? "" : " without data.eval_file") + ", so checkpoints could not be ranked nor early stopping "
              "decide; use one of " + list);
}

}  // namespace shardtrain
