// Reading, overriding, validating and printing a RunConfig.
//
//   RunConfig c = load_run_config("configs/quickstart.toml", {{"train.lr", "3e-5"}});
//
// Order: defaults < config file < overrides. Every problem is a
// shardtrain::Error that names the key and says what is allowed:
//   unknown key 'train.lrr' in configs/x.toml (line 7); did you mean 'train.lr'?
//   train.lr: expected a number, got 'fast'
//   train.mixed_precision = 'fp16' needs run.device = "cuda"; on CPU use "bf16" or "no"
#pragma once

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "shardtrain/core/run_config.h"

namespace shardtrain {

using ConfigOverrides = std::vector<std::pair<std::string, std::string>>;

// Parses `file` (TOML; empty = none), applies `overrides` ("section.key", value),
// fills derived defaults (run.name, model.vocab, data.format) and validates.
RunConfig load_run_config(const std::string& file, const ConfigOverrides& overrides);

// Checks ranges, choices and combinations. `keys_set` lists the keys the user
// gave explicitly (file or command line); some combinations depend on it.
void validate_run_config(const RunConfig& config, const std::set<std::string>& keys_set);

// The resolved config as TOML that load_run_config() reads back unchanged.
std::string config_to_toml(const RunConfig& config);

// All key names, in file order.
std::vector<std::string> config_key_names();

}  // namespace shardtrain
