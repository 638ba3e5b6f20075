// sweep.metric against the metrics the base config's task reports, checked
// before any trial starts (docs/sweeps.md, "The sweep file"): a name no
// evaluation reports would fail every trial at its first evaluation.
//
//   check_sweep_metric(spec, base);   // Error: "sweep.metric = 'eval_nonsense': ..."
#pragma once

#include <string>
#include <vector>

#include "shardtrain/core/run_config.h"
#include "shardtrain/sweep/space.h"

namespace shardtrain {

// The metrics every evaluation of a run with `config` reports, by its task:
// train_loss and the task's eval_* names (train/evaluate.h,
// tasks/question_answering.h).
std::vector<std::string> sweep_metric_names(const RunConfig& config);
// Whether an evaluation of a run with `config` may report `metric`: one of
// sweep_metric_names, or a name that depends on the data: eval_macro_f1 when
// model.num_labels is 0 (more than two classes in the data), a token
// classification's eval_<TYPE>_f1, SQuAD v2's eval_HasAns_* and eval_NoAns_*.
bool sweep_metric_allowed(const RunConfig& config, const std::string& metric);
// Throws Error naming sweep.metric, the task and the metrics it reports when
// sweep_metric_allowed is false.
void check_sweep_metric(const SweepSpec& spec, const RunConfig& base);

}  // namespace shardtrain
