// `shardtrain sweep --config SWEEP.toml`: a hyperparameter sweep inside one
// allocation (sweep/runner.h; docs/sweeps.md). `--status DIR` prints a sweep
// folder's table and writes its results.csv and best.json.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "shardtrain/cli/config.h"
#include "shardtrain/comm/mpi_helpers.h"
#include "shardtrain/comm/watchdog.h"
#include "shardtrain/comm/world.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/signals.h"
#include "shardtrain/sweep/metric.h"
#include "shardtrain/sweep/results.h"
#include "shardtrain/sweep/runner.h"

namespace shardtrain {
namespace {

struct SweepFlags {
  std::string config;
  std::string status_dir;
  bool resume = false;
};

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

RunConfig load_base(const SweepSpec& spec, const LoadOptions& load) {
  std::error_code error;
  if (std::filesystem::is_directory(spec.base, error)) {
    std::vector<std::string> tomls;
    for (const auto& entry : std::filesystem::directory_iterator(spec.base, error))
      if (entry.path().extension() == ".toml") tomls.push_back(entry.path().filename().string());
    std::sort(tomls.begin(), tomls.end());
    std::string some;
    for (size_t i = 0; i < tomls.size() && i < 5; ++i) some += (some.empty() ? "" : ", ") + tomls[i];
    throw Error("sweep.base = " + spec.base + " (" + spec.file + ") is a directory: name the run config file (TOML) "
                "every trial starts from" + (some.empty() ? std::string() : "; that folder holds " + some));
  }
  try {
    return load_run_config(spec.base, {}, load);
  } catch (const Error& e) {
    throw Error("sweep.base = " + spec.base + ": " + e.what());
  }
}

// The base's resolved values, key -> TOML text (config_to_toml's lines; an
// unset optional key is its "# key = (unset)" comment), but for the keys the
// sweep sets: run.name, run.storage_path (the sweep folder may move) and the
// space's keys (the sweep file's values win).
std::map<std::string, std::string> base_config_values(const RunConfig& base, const SweepSpec& spec) {
  std::map<std::string, std::string> values;
  std::istringstream lines(config_to_toml(base));
  std::string line, section;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    if (line.front() == '[') {
      section = line.substr(1, line.size() - 2);
      continue;
    }
    const bool unset = line.rfind("# ", 0) == 0;
    const size_t equals = line.find(" = ");
    if (equals == std::string::npos) continue;
    const std::string key = section + "." + line.substr(unset ? 2 : 0, equals - (unset ? 2 : 0));
    values[key] = line.substr(equals + 3);
  }
  values.erase("run.name");
  values.erase("run.storage_path");
  for (const SpaceDimension& d : spec.space) values.erase(d.key);
  return values;
}

// Every trial's config, loaded and validated as `train` would, before any
// trial starts: a bad value stops the sweep here, naming the trial and key.
SweepPlan make_plan(const SweepFlags& flags, int world_size) {
  SweepPlan plan;
  plan.spec = read_sweep_file(flags.config);
  const SweepSpec& spec = plan.spec;
  if (world_size % spec.ranks_per_trial != 0)
    throw Error(str_format("sweep.ranks_per_trial = %lld does not divide the job's %d ranks (%s): start a multiple "
                           "of %lld ranks, or change sweep.ranks_per_trial",
                           static_cast<long long>(spec.ranks_per_trial), world_size, flags.config.c_str(),
                           static_cast<long long>(spec.ranks_per_trial)));
  LoadOptions load;
  load.world_size = static_cast<int>(spec.ranks_per_trial);
  const RunConfig base = load_base(spec, load);
  if (base.data.eval_file.empty())
    throw Error("sweep.metric = '" + spec.metric + "' needs evaluations: the base config " + spec.base +
                " sets no data.eval_file");
  check_sweep_metric(spec, base);
  plan.base_config = base_config_values(base, spec);
  plan.dir = (std::filesystem::path(base.run.storage_path) / spec.name).string();
  plan.lock_timeout_s = base.run.collective_timeout_s;
  plan.trials = make_trials(spec);
  for (const TrialSpec& trial : plan.trials) {
    ConfigOverrides overrides = trial.params;
    if (spec.repeats > 1) overrides.emplace_back("train.seed", std::to_string(base.train.seed + trial.repeat));
    overrides.emplace_back("run.storage_path", plan.dir);
    overrides.emplace_back("run.name", trial.id);
    std::string params;
    for (const auto& [key, value] : trial.params) params += (params.empty() ? "" : ", ") + key + " = " + value;
    try {
      plan.configs.push_back(load_run_config(spec.base, overrides, load));
    } catch (const Error& e) {
      throw Error(trial.id + " (" + params + ") of " + flags.config + ": " +
                  replace_all(e.what(), " (on the command line)", " (sweep.space)") + "; nothing was started");
    }
    plan.config_tomls.push_back(config_to_toml(plan.configs.back()));
  }
  return plan;
}

void print_results(const std::string& dir, const SweepState& state) {
  const SweepResults results = summarize_sweep(state);
  write_sweep_results(dir, state, results);
  std::printf("%s", sweep_table(state, results).c_str());
  std::printf("sweep folder: %s (sweep_state.json, results.csv, best.json, one run folder per trial)\n", dir.c_str());
  std::fflush(stdout);
}

// "" when some trial finished or was pruned; else why the sweep failed.
std::string no_trial_finished(const std::string& dir, const SweepState& state) {
  int64_t failed = 0;
  for (const TrialRecord& t : state.trials) {
    if (t.status == TrialStatus::kFinished || t.status == TrialStatus::kPruned) return "";
    failed += t.status == TrialStatus::kFailed ? 1 : 0;
  }
  return str_format("no trial of the sweep in %s finished: %lld of %zu failed (their errors are in the table above "
                    "and in results.csv)", dir.c_str(), static_cast<long long>(failed), state.trials.size());
}

}  // namespace

void add_sweep_command(CLI::App& root, World& world) {
  auto flags = std::make_shared<SweepFlags>();
  CLI::App* command = root.add_subcommand(
      "sweep", "Hyperparameter sweep in one allocation: grid / random search, ASHA pruning, seed repeats "
               "(folder <run.storage_path>/<sweep.name>; re-running resumes)");
  CLI::Option* config = command->add_option("-c,--config", flags->config, "the sweep file (TOML: [sweep], [sweep.space])")
                            ->check(CLI::ExistingFile);
  CLI::Option* status = command->add_option("--status", flags->status_dir,
                                            "print the table of this sweep folder, write its results.csv and best.json")
                            ->check(CLI::ExistingDirectory)
                            ->excludes(config);
  command->add_flag("--resume", flags->resume,
                    "resume the sweep (the default when its folder exists; with --resume a missing folder is an error)")
      ->excludes(status);
  command->callback([flags, &world]() {
    if (!flags->status_dir.empty()) {
      on_rank0(world.comm(), "sweep --status: rank 0 reads the state", [&] {
        if (!sweep_state_exists(flags->status_dir))
          throw Error("--status " + flags->status_dir + ": no sweep_state.json there (not a sweep folder)");
        SweepState state = read_sweep_state(flags->status_dir);
        check_trial_files(flags->status_dir, state);
        print_results(flags->status_dir, state);
      });
      return;
    }
    if (flags->config.empty()) throw Error("sweep: give --config SWEEP.toml, or --status DIR (run with --help for usage)");
    const double start = MPI_Wtime();
    const SweepPlan plan = make_plan(*flags, world.size());
    if (flags->resume && !sweep_state_exists(plan.dir))
      throw Error("--resume: " + plan.dir + " holds no sweep to resume (no sweep_state.json); leave --resume out to "
                  "start it");
    set_default_phase_timeout_s(plan.configs.front().run.collective_timeout_s);
    log_info("shardtrain sweep %s on %d rank(s): %zu trials, %lld rank(s) each, %d at a time; folder %s",
             plan.spec.name.c_str(), world.size(), plan.trials.size(),
             static_cast<long long>(plan.spec.ranks_per_trial),
             world.size() / static_cast<int>(plan.spec.ranks_per_trial), plan.dir.c_str());
    // SIGTERM / SIGUSR1 from here on: each group stops at its next step
    // boundary with an emergency checkpoint; exit 143.
    install_preemption_handler(plan.configs.front().checkpoint.preemption_grace_s);
    const SweepOutcome outcome = run_sweep(plan, world.comm());
    const std::string none_finished = rank0_value(world.comm(), "sweep: the results", [&]() -> std::string {
      if (outcome.nothing_to_do) std::printf("nothing to do: every trial of %s is done\n", plan.dir.c_str());
      print_results(plan.dir, outcome.state);
      if (!outcome.nothing_to_do) std::printf("wall time: %.1f s\n", MPI_Wtime() - start);
      std::fflush(stdout);
      return no_trial_finished(plan.dir, outcome.state);
    });
    if (!none_finished.empty()) throw Error(none_finished);
  });
}

}  // namespace shardtrain
