// A sweep's results from its state (sweep/state.h): `shardtrain sweep
// --status DIR`, and the end of every sweep job.
//
//   SweepResults r = summarize_sweep(state);
//   std::printf("%s", sweep_table(state, r).c_str());
//   write_sweep_results(dir, state, r);    // results.csv and best.json, when they change
//
// A trial's value is the best sweep.metric over its evaluations (max or min by
// sweep.mode); trials sort by it, best first, trials with none last. With
// repeats, each configuration's mean and sample standard deviation over its
// seeds' values, and each seed's value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardtrain/sweep/state.h"

namespace shardtrain {

struct TrialResult {
  const TrialRecord* trial = nullptr;
  std::vector<double> values;  // sweep.metric per evaluation
  double best = 0;             // NaN when there is none
  int64_t best_evaluation = 0;
};

struct ConfigResult {
  int64_t config_index = 0;
  std::vector<const TrialResult*> seeds;  // by repeat
  double mean = 0, std_dev = 0;           // NaN without values; std 0 for one seed
};

struct SweepResults {
  std::vector<TrialResult> trials;    // sorted, best first
  std::vector<ConfigResult> configs;  // sorted by mean, best first
  // The first trial with a value whose files are there (TrialRecord::missing
  // empty); nullptr when there is none.
  const TrialResult* best = nullptr;
};

SweepResults summarize_sweep(const SweepState& state);
// The table: one row per trial (status, "missing" for a trial whose files
// are gone, parameters, the metric at each rung, evaluations, last and best
// value, checkpoint); with repeats, one row per configuration after it.
std::string sweep_table(const SweepState& state, const SweepResults& results);
std::string sweep_results_csv(const SweepState& state, const SweepResults& results);
// best.json's paths (checkpoint, run_dir, config) are relative to the sweep folder.
std::string sweep_best_json(const SweepState& state, const SweepResults& results);
// <dir>/results.csv and <dir>/best.json, each written (atomically) only when
// its content changes.
void write_sweep_results(const std::string& sweep_dir, const SweepState& state, const SweepResults& results);

}  // namespace shardtrain
