#include "shardtrain/train/early_stopping.h"

#include <cmath>

#include "shardtrain/core/log.h"

namespace shardtrain {

EarlyStopping::EarlyStopping(const TrainConfig& train, const CheckpointConfig& checkpoint)
    : patience_(train.early_stopping_patience),
      threshold_(train.early_stopping_threshold),
      attribute_(checkpoint.score_attribute),
      maximize_(checkpoint.score_order == ScoreOrder::kMax) {}

bool EarlyStopping::update(const std::map<std::string, double>& metrics, int64_t step) {
  if (!enabled() || state_.stopped) return state_.stopped;
  const auto it = metrics.find(attribute_);
  if (it == metrics.end()) return false;
  const double score = it->second;
  const bool better = !state_.best || (maximize_ ? score > *state_.best : score < *state_.best);
  if (better && (!state_.best || std::fabs(score - *state_.best) > threshold_)) {
    state_.best = score;
    state_.best_step = step;
    state_.bad_evals = 0;
  } else {
    ++state_.bad_evals;
  }
  state_.stopped = state_.bad_evals >= patience_;
  return state_.stopped;
}

std::string EarlyStopping::reason() const {
  return str_format("%s did not improve on its best %.4f (step %lld) by more than %g for %lld evaluations "
                    "(train.early_stopping_patience = %lld)",
                    attribute_.c_str(), state_.best ? *state_.best : std::nan(""),
                    static_cast<long long>(state_.best_step), threshold_, static_cast<long long>(state_.bad_evals),
                    static_cast<long long>(patience_));
}

}  // namespace shardtrain
