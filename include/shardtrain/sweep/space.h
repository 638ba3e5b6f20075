// A sweep file and the trials it defines (docs/sweeps.md): `shardtrain sweep
// --config SWEEP.toml`.
//
//   [sweep]
//   base = "quickstart.toml"      # the run config every trial starts from (relative to this file)
//   name = "mrpc_lr"              # the sweep folder <base's run.storage_path>/<name>
//   metric = "eval_accuracy"      # any metric the task's evaluation reports
//   mode = "max"                  # or "min"
//   num_samples = 2               # samples of the random keys per grid point (Ray Tune's num_samples)
//   repeats = 1                   # seeds per configuration (train.seed = base seed + repeat)
//   ranks_per_trial = 1
//   seed = 0                      # the sampler's seed: the same seed, the same trials
//   scheduler = "asha"            # or "none" (the default: every trial runs to its end)
//   grace_period = 1              # ASHA, in evaluations (sweep/asha.h)
//   reduction_factor = 4
//   max_t = 100
//   [sweep.space]
//   "train.lr" = { loguniform = [1e-5, 1e-3] }
//   "train.batch_size" = { grid = [8, 16] }
//
// A key of the space is any run-config key (`config --help`), quoted, or as a
// nested table ([sweep.space.train] lr = {...}). Its domain is one of
//   grid = [v, ...]         every value, crossed with the other grid keys (Ray Tune's grid_search)
//   choice = [v, ...]       one value drawn uniformly per sample (tune.choice)
//   uniform = [a, b]        a real in [a, b) (tune.uniform)
//   loguniform = [a, b]     a real whose log is uniform in [log a, log b), 0 < a < b (tune.loguniform)
//   randint = [a, b]        an integer in [a, b), b exclusive as in tune.randint; a and b are
//                           TOML integers, read, drawn and written as int64 (any a < b, 2^53 and
//                           past it included)
//
// Every problem is an Error naming the key: "sweep.space.train.lrr: unknown
// run-config key ...", "sweep.space.train.lr: loguniform needs 0 < a < b, got a = 0".
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace shardtrain {

enum class SpaceKind { kGrid, kChoice, kUniform, kLogUniform, kRandInt };

struct SpaceDimension {
  std::string key;                  // a run-config key, "train.lr"
  SpaceKind kind = SpaceKind::kGrid;
  std::vector<std::string> values;  // grid / choice: each value as config text ("2e-05", "true", "zero2")
  double low = 0, high = 0;         // uniform / loguniform
  int64_t int_low = 0, int_high = 0;  // randint: [int_low, int_high), exact integers
};

struct SweepSpec {
  std::string file;      // the sweep file as given
  std::string base;      // [sweep] base, resolved against the sweep file's folder
  std::string name;
  std::string metric;
  bool maximize = true;  // mode = "max"
  int64_t num_samples = 1;
  int64_t repeats = 1;
  int64_t ranks_per_trial = 1;
  int64_t seed = 0;
  bool asha = false;           // scheduler = "asha"; false: "none"
  int64_t grace_period = 1;    // ASHA (Ray Tune's ASHAScheduler defaults)
  int64_t reduction_factor = 4;
  int64_t max_t = 100;
  std::vector<SpaceDimension> space;  // sorted by key
};

// One trial: a configuration (config_index) run with one seed (repeat).
struct TrialSpec {
  std::string id;         // "trial_003", "trial_003_r1" with repeats
  int64_t config_index = 0;
  int64_t repeat = 0;
  std::vector<std::pair<std::string, std::string>> params;  // (key, config text), in space order
};

// The most trials one sweep file may make (num_samples x grid points x repeats).
constexpr int64_t kMaxTrials = 100000;

// Parses a sweep file (TOML). Throws Error naming the key or line.
SweepSpec read_sweep_file(const std::string& path);
// The same from text; `base_dir` resolves a relative [sweep] base.
SweepSpec parse_sweep_text(const std::string& text, const std::string& source, const std::string& base_dir);

// The trials, in order: for each of num_samples, each grid point (the last
// grid key varying fastest), the random keys drawn from one generator seeded
// with spec.seed; then each configuration's repeats. Pure: the same spec gives
// the same trials.
std::vector<TrialSpec> make_trials(const SweepSpec& spec);

// "grid", "choice", ...
const char* space_kind_name(SpaceKind kind);

}  // namespace shardtrain
