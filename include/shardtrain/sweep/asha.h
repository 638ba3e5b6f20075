// Asynchronous successive halving (ASHA; Li et al. 2020), the rule of Ray
// Tune's ASHAScheduler with one bracket (docs/sweeps.md, "ASHA").
//
//   Asha asha({grace_period, reduction_factor, max_t, maximize}, "eval_accuracy");
//   AshaDecision d = asha.on_result("trial_003", evaluation, value);   // evaluation: 1, 2, ...
//   if (d.stop) ...    // d.reason says why, with the numbers
//
// Time is counted in evaluations. The rungs are at grace_period x
// reduction_factor^k evaluations, below max_t. When a trial reports at (or
// past) a rung it has not reported at yet, its value is compared with the
// values recorded at that rung so far (by other trials, before it): it stops
// unless it reaches their (1 - 1/reduction_factor) quantile (linear
// interpolation, numpy's percentile; NaN values left out; the first value at a
// rung always goes on), i.e. unless it is in the top 1/reduction_factor of
// them. Its value is then recorded there. A trial reporting at max_t
// evaluations stops ("max_t reached"). With mode = "min" the values are
// negated first. The decisions depend on the order of the reports; a resumed
// sweep replays the recorded reports in their recorded order.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace shardtrain {

struct AshaConfig {
  int64_t grace_period = 1;
  int64_t reduction_factor = 4;
  int64_t max_t = 100;
  bool maximize = true;
};

struct AshaDecision {
  bool stop = false;
  // Stopped because its result fell below the rung's cutoff (not max_t):
  // the trial is pruned.
  bool pruned = false;
  int64_t rung = 0;     // the rung's evaluation count this report was recorded at; 0 = none
  std::string reason;   // "rung 3: eval_accuracy 0.61 < cutoff 0.65 (...)", "max_t reached", ...
};

class Asha {
 public:
  Asha(const AshaConfig& config, std::string metric);
  // The rungs' evaluation counts, ascending.
  std::vector<int64_t> rungs() const;
  AshaDecision on_result(const std::string& trial, int64_t evaluation, double value);

 private:
  struct Rung {
    int64_t milestone = 0;
    std::vector<std::pair<std::string, double>> recorded;  // (trial, value as maximized), in order
  };
  AshaConfig config_;
  std::string metric_;
  std::vector<Rung> rungs_;  // descending milestones
};

// numpy.percentile(values, q) with linear interpolation, NaNs left out
// (numpy.nanpercentile); NaN when no value is left. q in [0, 100].
double percentile_linear(std::vector<double> values, double q);

}  // namespace shardtrain
