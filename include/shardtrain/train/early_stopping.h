// Early stopping, with transformers' EarlyStoppingCallback semantics
// (docs/DESIGN.md, "The training job"):
//
//   an evaluation improves when checkpoint.score_attribute is better than the
//   best so far (greater for score_order "max", smaller for "min") by more than
//   train.early_stopping_threshold; the first evaluation sets the best. After
//   train.early_stopping_patience evaluations in a row without improvement,
//   training stops.
//
//   EarlyStopping early(config.train, config.checkpoint);
//   if (early.enabled() && early.update(report.metrics, step)) stop(early.reason());
//
// Only reports that carry the metric count (a checkpoint-only report does not).
// The state travels in training checkpoints (TrainState), so a resumed run
// counts on, and a run that stopped early stays stopped.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "shardtrain/core/run_config.h"

namespace shardtrain {

struct EarlyStoppingState {
  std::optional<double> best;  // the best score so far
  int64_t best_step = 0;       // the step it was reached at
  int64_t bad_evals = 0;       // evaluations in a row without improvement
  bool stopped = false;        // training stopped early
};

class EarlyStopping {
 public:
  EarlyStopping(const TrainConfig& train, const CheckpointConfig& checkpoint);

  bool enabled() const { return patience_ > 0; }

  // Feeds the metrics of a report at `step`; true when training stops now.
  // Does nothing (false) when the metric is not among them.
  bool update(const std::map<std::string, double>& metrics, int64_t step);

  // "eval_mcc did not improve on its best 0.3120 (step 230) by more than 0
  // for 3 evaluations (train.early_stopping_patience = 3)".
  std::string reason() const;

  const EarlyStoppingState& state() const { return state_; }
  void load(const EarlyStoppingState& state) { state_ = state; }

 private:
  int64_t patience_;
  double threshold_;
  std::string attribute_;
  bool maximize_;
  EarlyStoppingState state_;
};

}  // namespace shardtrain
