#include "shardtrain/sweep/asha.h"

#include <algorithm>
#include <cmath>

#include "shardtrain/core/log.h"
#include "shardtrain/core/text.h"

namespace shardtrain {

double percentile_linear(std::vector<double> values, double q) {
  values.erase(std::remove_if(values.begin(), values.end(), [](double v) { return std::isnan(v); }), values.end());
  if (values.empty()) return NAN;
  std::sort(values.begin(), values.end());
  const double position = q / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(position));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  const double fraction = position - static_cast<double>(lo);
  return values[lo] + (values[hi] - values[lo]) * fraction;
}

Asha::Asha(const AshaConfig& config, std::string metric) : config_(config), metric_(std::move(metric)) {
  // Integer milestones below max_t (Ray computes the count with logarithms;
  // the same rungs in exact arithmetic).
  std::vector<int64_t> milestones;
  for (int64_t m = config_.grace_period; m < config_.max_t; m *= config_.reduction_factor) {
    milestones.push_back(m);
    if (m > config_.max_t / config_.reduction_factor) break;
  }
  for (size_t i = milestones.size(); i-- > 0;) rungs_.push_back({milestones[i], {}});
}

std::vector<int64_t> Asha::rungs() const {
  std::vector<int64_t> out;
  for (size_t i = rungs_.size(); i-- > 0;) out.push_back(rungs_[i].milestone);
  return out;
}

AshaDecision Asha::on_result(const std::string& trial, int64_t evaluation, double value) {
  AshaDecision d;
  const std::string shown = metric_ + " " + shortest_text(value);
  if (evaluation >= config_.max_t) {
    d.stop = true;
    d.reason = str_format("max_t reached (%lld evaluations)", static_cast<long long>(config_.max_t));
    return d;
  }
  const double signed_value = config_.maximize ? value : -value;
  for (Rung& rung : rungs_) {  // the highest rung reached first, as Ray's _Bracket.on_result
    if (evaluation < rung.milestone) continue;
    const bool seen = std::any_of(rung.recorded.begin(), rung.recorded.end(),
                                  [&](const auto& r) { return r.first == trial; });
    if (seen) break;
    std::vector<double> others;
    for (const auto& r : rung.recorded) others.push_back(r.second);
    const double quantile = (1.0 - 1.0 / static_cast<double>(config_.reduction_factor)) * 100.0;
    const double cutoff = percentile_linear(others, quantile);
    d.rung = rung.milestone;
    const std::string cutoff_text = shortest_text(config_.maximize ? cutoff : -cutoff);
    const std::string among = str_format("%zu earlier result%s at this rung", others.size(), others.size() == 1 ? "" : "s");
    if (std::isnan(cutoff)) {
      d.reason = str_format("rung %lld: %s, the first result at this rung", static_cast<long long>(rung.milestone),
                            shown.c_str());
    } else if (signed_value < cutoff) {
      d.stop = true;
      d.pruned = true;
      d.reason = str_format("pruned at rung %lld: %s is not in the top 1/%lld of %s (cutoff %s)",
                            static_cast<long long>(rung.milestone), shown.c_str(),
                            static_cast<long long>(config_.reduction_factor), among.c_str(), cutoff_text.c_str());
    } else {
      d.reason = str_format("rung %lld: %s is in the top 1/%lld of %s (cutoff %s)",
                            static_cast<long long>(rung.milestone), shown.c_str(),
                            static_cast<long long>(config_.reduction_factor), among.c_str(), cutoff_text.c_str());
    }
    rung.recorded.emplace_back(trial, signed_value);
    return d;
  }
  d.reason = "no rung reached";
  return d;
}

}  // namespace shardtrain
