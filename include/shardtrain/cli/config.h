// Reading, overriding, validating and printing a RunConfig.
//
//   RunConfig c = load_run_config("configs/quickstart.toml", {{"train.lr", "3e-5"}});
//
// Order: defaults < config file < overrides. Every problem is a
// shardtrain::Error that names the key and says what is allowed:
//   unknown key 'train.lrr' in configs/x.toml (line 7); did you mean 'train.lr'?
//   train.lr: expected a number, got 'fast'
//   train.mixed_precision = 'fp16' needs run.device = "cuda"; on CPU use "bf16" or "no"
//   parallel.zero.stage3_prefetch_bucket_size only applies when parallel.strategy is "zero3" or "hybrid"
#pragma once

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "shardtrain/core/run_config.h"

namespace shardtrain {

using ConfigOverrides = std::vector<std::pair<std::string, std::string>>;

struct LoadOptions {
  // Ranks of the job: a DeepSpeed JSON's train_batch_size is checked against
  // (and "auto" resolves to) train_micro_batch_size_per_gpu x accumulation x world_size.
  int world_size = 1;
  // If not null, receives one line per DeepSpeed JSON key saying what it
  // resolved to (see cli/deepspeed_config.h); print them on rank 0.
  std::vector<std::string>* deepspeed_lines = nullptr;
};

// Parses `file` (TOML; empty = none), applies `overrides` ("section.key", value),
// fills derived defaults (run.name, model.vocab, data.format), applies
// parallel.deepspeed_config (cli/deepspeed_config.h) when set, and validates.
RunConfig load_run_config(const std::string& file, const ConfigOverrides& overrides,
                          const LoadOptions& options = LoadOptions());

// Checks ranges, choices and combinations. `keys_set` lists the keys the user
// gave explicitly (file or command line); some combinations depend on it.
void validate_run_config(const RunConfig& config, const std::set<std::string>& keys_set);

// The resolved config as TOML that load_run_config() reads back unchanged.
std::string config_to_toml(const RunConfig& config);

// All key names, in file order.
std::vector<std::string> config_key_names();

}  // namespace shardtrain
