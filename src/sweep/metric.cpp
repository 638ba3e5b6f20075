#include "shardtrain/sweep/metric.h"

#include <algorithm>

#include "shardtrain/core/check.h"
#include "shardtrain/tasks/task_rules.h"

namespace shardtrain {

std::vector<std::string> sweep_metric_names(const RunConfig& config) {
  // num_labels 0 (from the data): two classes at least, as train settles it.
  const int64_t num_labels = config.model.num_labels;
  return reported_metric_names(config.model.task, num_labels == 0 ? 2 : num_labels, config.data, true);
}

bool sweep_metric_allowed(const RunConfig& config, const std::string& metric) {
  return metric_may_be_reported(metric, config.model.task, config.model.num_labels, config.data, true) ||
         metric_may_be_reported(metric, config.model.task, config.model.num_labels == 0 ? 2 : config.model.num_labels,
                                config.data, true);
}

void check_sweep_metric(const SweepSpec& spec, const RunConfig& base) {
  if (sweep_metric_allowed(base, spec.metric)) return;
  std::string list;
  for (const std::string& name : sweep_metric_names(base)) list += (list.empty() ? "" : ", ") + name;
  throw Error("sweep.metric = '" + spec.metric + "' (" + spec.file + ") is never reported by model.task = \"" +
              enum_name(base.model.task) + "\" (the base config " + spec.base + "); its evaluations report " + list +
              task_rules(base.model.task).data_dependent_metrics_note(base.model.num_labels, base.data) +
              "; nothing was started");
}

}  // namespace shardtrain
