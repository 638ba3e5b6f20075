#include "shardtrain/sweep/metric.h"

#include <algorithm>

#include "shardtrain/core/check.h"
#include "shardtrain/train/evaluate.h"
#include "shardtrain/train/qa_postprocess.h"

namespace shardtrain {
namespace {

bool starts_with(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }
bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The names an evaluation reports only for some data, and how the error
// message describes them.
bool data_dependent(const RunConfig& config, const std::string& metric) {
  switch (config.model.task) {
    case Task::kSequenceClassification:
      return config.model.num_labels == 0 && metric == "eval_macro_f1";
    case Task::kTokenClassification:  // eval_<TYPE>_f1, per entity type of the data
      return metric.size() > std::string("eval__f1").size() && starts_with(metric, "eval_") && ends_with(metric, "_f1");
    case Task::kQuestionAnswering:
      return config.data.version_2_with_negative &&
             (metric == "eval_HasAns_exact" || metric == "eval_HasAns_f1" || metric == "eval_NoAns_exact" ||
              metric == "eval_NoAns_f1");
    case Task::kMultipleChoice: return false;
  }
  return false;
}

std::string data_dependent_note(const RunConfig& config) {
  switch (config.model.task) {
    case Task::kSequenceClassification:
      return config.model.num_labels == 0 ? ", and eval_macro_f1 when the data has more than two classes" : "";
    case Task::kTokenClassification: return ", and eval_<TYPE>_f1 for each entity type of the data";
    case Task::kQuestionAnswering:
      return config.data.version_2_with_negative ? ", and eval_HasAns_exact, eval_HasAns_f1, eval_NoAns_exact, "
                                                   "eval_NoAns_f1 when the eval data holds such questions"
                                                 : "";
    case Task::kMultipleChoice: return "";
  }
  return "";
}

}  // namespace

std::vector<std::string> sweep_metric_names(const RunConfig& config) {
  if (config.model.task == Task::kQuestionAnswering) {
    std::vector<std::string> names = {"train_loss"};
    for (const std::string& name : qa_metric_names(config.data.version_2_with_negative)) names.push_back(name);
    return names;
  }
  // num_labels 0 (from the data): two classes at least, as train settles it.
  const int64_t num_labels = config.model.task == Task::kSequenceClassification && config.model.num_labels == 0
                                 ? 2
                                 : config.model.num_labels;
  return reported_metric_names(config.model.task, num_labels, true);
}

bool sweep_metric_allowed(const RunConfig& config, const std::string& metric) {
  const std::vector<std::string> names = sweep_metric_names(config);
  return std::find(names.begin(), names.end(), metric) != names.end() || data_dependent(config, metric);
}

void check_sweep_metric(const SweepSpec& spec, const RunConfig& base) {
  if (sweep_metric_allowed(base, spec.metric)) return;
  std::string list;
  for (const std::string& name : sweep_metric_names(base)) list += (list.empty() ? "" : ", ") + name;
  throw Error("sweep.metric = '" + spec.metric + "' (" + spec.file + ") is never reported by model.task = \"" +
              choice_name(base.model.task) + "\" (the base config " + spec.base + "); its evaluations report " +
              list + data_dependent_note(base) + "; nothing was started");
}

}  // namespace shardtrain
