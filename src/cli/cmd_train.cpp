// `shardtrain train`: the main job (train/trainer.h does the work).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/config_flags.h"
#include "shardtrain/comm/world.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/train/trainer.h"

namespace shardtrain {

void add_train_command(CLI::App& root, World& world) {
  CLI::App* command = root.add_subcommand(
      "train", "Fine-tune a BERT classifier (run folder: <run.storage_path>/<run.name>; re-running resumes)");
  auto flags = add_config_flags(*command);
  auto resume = std::make_shared<std::string>();
  command->add_option("--resume", *resume,
                      "resume from this checkpoint instead of the run folder's newest")
      ->check(CLI::ExistingFile);
  command->callback([flags, resume, &world]() {
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
    TrainOptions options;
    // The saved config records what the DeepSpeed JSON resolved to, as comments.
    for (const auto& line : deepspeed_lines) options.config_toml += "# " + line + "\n";
    options.config_toml += config_to_toml(config);
    options.resume_from = *resume;
    world.log_binding();
    log_info("shardtrain train on %d rank(s), %d thread(s) each; resolved config:\n%s", world.size(),
             world.num_threads(), options.config_toml.c_str());
    const TrainResult result = train(config, world.comm(), options);
    if (world.rank() != 0) return;
    if (!result.reports.empty()) {
      std::string metrics;
      for (const auto& kv : result.reports.back().metrics)
        if ((kv.first.rfind("eval_", 0) == 0 && kv.first != "eval_seconds") || kv.first == "train_loss")
          metrics += str_format("  %s %.4f\n", kv.first.c_str(), kv.second);
      std::printf("final metrics (step %lld):\n%s", static_cast<long long>(result.reports.back().step),
                  metrics.c_str());
    }
    std::printf("run folder:        %s (result.jsonl, progress.csv, train.log)\n", result.run_dir.c_str());
    if (!result.last_checkpoint.empty()) std::printf("newest checkpoint: %s\n", result.last_checkpoint.c_str());
    if (!result.best_checkpoint.empty()) std::printf("best checkpoint:   %s\n", result.best_checkpoint.c_str());
    std::fflush(stdout);
  });
}

}  // namespace shardtrain
