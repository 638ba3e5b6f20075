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
#include "shardtrain/config/config.h"
#include "shardtrain/comm/mpi_helpers.h"
#include "shardtrain/comm/watchdog.h"
#include "shardtrain/comm/world.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/signals.h"
#include "shardtrain/sweep/plan.h"
#include "shardtrain/sweep/results.h"
#include "shardtrain/sweep/runner.h"

namespace shardtrain {
namespace {

struct SweepFlags {
  std::string config;
  std::string status_dir;
  bool resume = false;
};

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
    const SweepPlan plan = make_sweep_plan(flags->config, world.size());
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
