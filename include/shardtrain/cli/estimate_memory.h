// `shardtrain estimate-memory`: the memory per rank of training a model, for
// a table of strategies and rank counts (train/memory_estimate.h).
//
//   shardtrain estimate-memory --model bert-base-cased/ --world-size 1,4,8 --mixed-precision bf16
//                              --device-memory 80GiB [--lora-r 8 [--lora-target-modules query,value]] [--json]
//
// The pure part, for tests: the command's flags, checked with errors that
// name the flag, and the lines it prints.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shardtrain/core/run_config.h"

namespace shardtrain {

struct EstimateMemoryArgs {
  std::string model;        // a HF folder or its config.json; empty: the run config's model
  std::optional<std::string> world_sizes;  // "1,2,4,8"; unset: 1,2,4,8
  std::string strategies = "all";  // "all" or a list of ddp, zero1, zero2, zero3, fsdp, hybrid
  // Empty: the run config's value (or the default).
  std::string mixed_precision, offload_optimizer, device, device_memory;
  // Unset: the run config's (train.batch_size, data.max_length, model.num_labels),
  // and for the labels then the model's config.json. Set: checked as those keys are
  // (config/config.h, parse_integer_setting: 0 is an error, not "the default").
  std::optional<int64_t> batch_size, seq_len, num_labels;
  // LoRA (model/lora.h): lora.r and lora.target_modules ("query,value",
  // "all-linear"; empty: the run config's, else the model type's default).
  std::optional<int64_t> lora_r;
  std::string lora_target_modules;
  bool gradient_checkpointing = false;
  bool json = false;
};

// "80GiB", "80 GB", "512MiB", "1.5T", "1000000" (bytes) -> bytes; GB / MB are
// decimal, GiB / MiB binary; the number is plain decimal (no "0x10"). Error
// naming `flag` otherwise.
double parse_memory_size(const std::string& text, const std::string& flag);

// The report: a table per world size (text), or one JSON object per
// (strategy, world size) (--json). `base`: the run config (--config) or
// RunConfig's defaults when `have_config` is false (then the device defaults
// to cuda: the usual question is whether a model fits on GPUs).
std::vector<std::string> estimate_memory_report(const RunConfig& base, bool have_config, const EstimateMemoryArgs& args);

}  // namespace shardtrain
