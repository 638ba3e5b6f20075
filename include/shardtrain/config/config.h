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

#include <cstdint>
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
  // resolved to (see config/deepspeed_config.h); print them on rank 0.
  std::vector<std::string>* deepspeed_lines = nullptr;
};

// Parses `file` (TOML; empty = none), applies `overrides` ("section.key", value),
// fills derived defaults (run.name, model.vocab, data.format), applies
// parallel.deepspeed_config (config/deepspeed_config.h) when set, and validates.
RunConfig load_run_config(const std::string& file, const ConfigOverrides& overrides,
                          const LoadOptions& options = LoadOptions());

// The run config a training checkpoint saved (config_to_toml's text, its
// config_toml attribute), read as a config file is, with none of
// load_run_config's derived values or checks: the run resolved and checked it.
// Error naming `source` for text that is not such a config (an unknown key: a
// checkpoint of another version).
RunConfig parse_saved_run_config(const std::string& toml_text, const std::string& source);

// Checks ranges, choices and combinations. `keys_set` lists the keys the user
// gave explicitly (file or command line); some combinations depend on it.
void validate_run_config(const RunConfig& config, const std::set<std::string>& keys_set);

// The resolved config as TOML that load_run_config() reads back unchanged.
std::string config_to_toml(const RunConfig& config);

// All key names, in file order.
std::vector<std::string> config_key_names();

// ---- numbers written as text: config overrides and every numeric flag ----------
// One reading for all of them: plain decimal only (no hex "0x10", no "inf" or
// "nan", no spaces), the whole text, in range. Errors name `name` (a key such
// as "train.batch_size" or a flag such as "--batch-size"):
//   --batch-size: expected an integer, got '0x10'
//   --batch-size = 0: must be in [1, 1099511627776]
int64_t parse_integer_setting(const std::string& name, const std::string& text, int64_t min = INT64_MIN,
                              int64_t max = INT64_MAX);
// A decimal number. With `rest` (a unit may follow, "80GiB"): the text after
// the number, spaces skipped; without it the number must be the whole text.
double parse_number_setting(const std::string& name, const std::string& text, std::string* rest = nullptr);

// Ranges of keys that estimate-memory's flags also set (validate_run_config
// checks the config's values against the same bounds).
constexpr int64_t kMinSequenceLength = 3;  // [CLS] and two [SEP]
constexpr int64_t kMaxSequenceLength = 65536;

}  // namespace shardtrain
