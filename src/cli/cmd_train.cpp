// `shardtrain train`: the main job (train/trainer.h does the work).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "cli/commands.h"
#include "cli/config_flags.h"
#include "shardtrain/comm/mpi_helpers.h"
#include "shardtrain/comm/watchdog.h"
#include "shardtrain/comm/world.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/signals.h"
#include "shardtrain/train/run_lock.h"
#include "shardtrain/train/trainer.h"

namespace shardtrain {

namespace {

// The last report's metrics beside the majority-class baseline (what a model
// that learned nothing scores), and how training ended.
void print_final_metrics(const TrainResult& result, const RunConfig& config) {
  const TrainReport& last = result.reports.back();
  const bool baseline = result.baseline.has_value();
  std::printf("final metrics (step %lld)%s\n", static_cast<long long>(last.step),
              baseline ? str_format("            %-8s  %s", "model", result.baseline->name.c_str()).c_str() : ":");
  for (const auto& kv : last.metrics) {
    if ((kv.first.rfind("eval_", 0) != 0 || kv.first == "eval_seconds") && kv.first != "train_loss") continue;
    std::string line = str_format("  %-30s %8.4f", kv.first.c_str(), kv.second);
    if (baseline) {
      const auto it = result.baseline->metrics.find(kv.first);
      if (it != result.baseline->metrics.end()) line += str_format("  %8.4f", it->second);
    }
    std::printf("%s\n", line.c_str());
  }
  if (baseline && !config.checkpoint.score_attribute.empty()) {
    const std::string& key = config.checkpoint.score_attribute;
    const auto model = last.metrics.find(key);
    const auto guess = result.baseline->metrics.find(key);
    if (model != last.metrics.end() && guess != result.baseline->metrics.end()) {
      const bool maximize = config.checkpoint.score_order == ScoreOrder::kMax;
      const bool beats = maximize ? model->second > guess->second : model->second < guess->second;
      std::printf("%s %s the baseline, %s (%.4f vs %.4f)\n", key.c_str(), beats ? "beats" : "does NOT beat",
                  result.baseline->name.c_str(), model->second, guess->second);
    }
  }
  if (result.stopped_early) std::printf("stopped early: %s\n", result.stop_reason.c_str());
}

// Rank 0: a run folder this job created, holding nothing but its train.log
// and lock (a job refused, or with nothing to train), is removed, so that no
// empty run folder is left behind.
void remove_run_folder_left_empty(const std::string& run_dir, std::unique_ptr<RunLock>& lock) {
  namespace fs = std::filesystem;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(run_dir, error)) {
    const std::string name = entry.path().filename().string();
    if (name != "train.log" && entry.path().string() != run_lock_path(run_dir)) return;
  }
  if (error) return;
  lock.reset();
  fs::remove(fs::path(run_dir) / "train.log", error);
  fs::remove(run_lock_path(run_dir), error);
  fs::remove(run_dir, error);
}

}  // namespace

void add_train_command(CLI::App& root, World& world) {
  CLI::App* command = root.add_subcommand(
      "train", "Fine-tune a BERT classifier (run folder: <run.storage_path>/<run.name>; re-running resumes)");
  auto flags = add_config_flags(*command);
  auto resume = std::make_shared<std::string>();
  command->add_option("--resume", *resume,
                      "resume from this checkpoint instead of the run folder's newest")
      ->check(CLI::ExistingFile);
  auto restart = std::make_shared<bool>(false);
  command->add_flag("--restart", *restart,
                    "start again from step 0 in a run folder that holds an earlier run's reports or only damaged "
                    "checkpoints (refused without it; damaged checkpoints are set aside, not deleted)")
      ->excludes("--resume");
  command->callback([flags, resume, restart, &world]() {
    LoadOptions load_options;
    load_options.world_size = world.size();
    std::vector<std::string> deepspeed_lines;
    load_options.deepspeed_lines = &deepspeed_lines;
    const RunConfig config = flags->load(load_options);
    // A requeued Slurm job (node failure, preemption, scontrol requeue) starts
    // again with SLURM_RESTART_COUNT set; train resumes, up to run.max_failures times.
    if (const char* restarts = std::getenv("SLURM_RESTART_COUNT")) {
      const long long count = std::atoll(restarts);
      if (config.run.max_failures >= 0 && count > config.run.max_failures)
        throw Error(str_format("this job has been restarted %lld times (SLURM_RESTART_COUNT) and run.max_failures = "
                               "%lld: not resuming again; raise run.max_failures (-1 = no limit) and resubmit",
                               count, static_cast<long long>(config.run.max_failures)));
      if (count > 0) log_info("restart %lld of this job (run.max_failures %lld)", count,
                              static_cast<long long>(config.run.max_failures));
    }
    // Every blocking phase (checkpoint I/O, gathers, broadcasts) times out as collectives do.
    set_default_phase_timeout_s(config.run.collective_timeout_s);
    // One job per run folder for the whole run (train/run_lock.h); once this
    // job holds it, temporary files in it are left over from dead jobs.
    std::unique_ptr<RunLock> lock;
    const std::string run_dir = (std::filesystem::path(config.run.storage_path) / config.run.name).string();
    bool created_run_dir = false;
    on_rank0(world.comm(), "taking the run folder's lock", [&] {
      refuse_link_loop(run_dir, "run.storage_path / run.name");
      std::error_code error;
      created_run_dir = !std::filesystem::exists(run_dir, error);
      std::filesystem::create_directories(run_dir, error);
      if (error || !std::filesystem::is_directory(run_dir))
        throw Error("run.storage_path: cannot create the run folder '" + run_dir + "': " + error.message());
      lock = std::make_unique<RunLock>(run_dir);
      if (!lock->took_over().empty())
        log_warn("took over the run folder's lock from %s", lock->took_over().c_str());
      for (const std::string& path : remove_stale_temp_files(run_dir))
        log_warn("removed %s, a temporary file of an earlier job that did not finish", path.c_str());
    });
    TrainOptions options;
    // The saved config records what the DeepSpeed JSON resolved to, as comments.
    for (const auto& line : deepspeed_lines) options.config_toml += "# " + line + "\n";
    options.config_toml += config_to_toml(config);
    options.resume_from = *resume;
    options.restart = *restart;
    world.log_binding();
    log_info("shardtrain train on %d rank(s), %d thread(s) each; resolved config:\n%s", world.size(),
             world.num_threads(), options.config_toml.c_str());
    // SIGTERM from here on: an emergency checkpoint at the next step boundary, then exit 143.
    install_preemption_handler(config.checkpoint.preemption_grace_s);
    TrainResult result;
    try {
      result = train(config, world.comm(), options);
    } catch (const Error& e) {
      // The error that ended or refused the job goes into train.log, as the
      // run's record of it (the setup lines of a refused job do not).
      if (world.rank() == 0)
        append_to_log_file((std::filesystem::path(run_dir) / "train.log").string(), std::string("error: ") + e.what());
      if (created_run_dir) remove_run_folder_left_empty(run_dir, lock);
      throw;
    } catch (...) {
      if (created_run_dir) remove_run_folder_left_empty(run_dir, lock);
      throw;
    }
    if (created_run_dir) remove_run_folder_left_empty(run_dir, lock);
    if (result.preempted) {
      if (world.rank() == 0)
        log_info("stopped for SIGTERM at step %lld of %lld, exit status %d; the same command (a Slurm requeue) "
                 "resumes from %s", static_cast<long long>(result.steps),
                 static_cast<long long>(result.num_training_steps), kPreemptedExitStatus,
                 result.last_checkpoint.empty() ? "the start (no checkpoint yet)" : result.last_checkpoint.c_str());
      throw Preempted("stopped for SIGTERM");
    }
    if (world.rank() != 0) return;
    if (!result.reports.empty()) print_final_metrics(result, config);
    if (result.nothing_to_do && created_run_dir)
      std::printf("nothing to train: the run folder %s was not kept\n", result.run_dir.c_str());
    else
      std::printf("run folder:        %s (result.jsonl, progress.csv, train.log)\n", result.run_dir.c_str());
    if (!result.last_checkpoint.empty()) std::printf("newest checkpoint: %s\n", result.last_checkpoint.c_str());
    if (!result.best_checkpoint.empty()) std::printf("best checkpoint:   %s\n", result.best_checkpoint.c_str());
    std::fflush(stdout);
  });
}

}  // namespace shardtrain
