// Whether an estimate fits, what would (train/memory_estimate.h), and the
// estimate as log text and JSON.
#include <algorithm>
#include <cmath>
#include <vector>

#include <nlohmann/json.hpp>

#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/train/memory_estimate.h"

namespace shardtrain {
namespace {

bool fits(const RunConfig& run, const EncoderConfig& model, int world_size, double capacity) {
  return estimate_memory(run, model, world_size).total_bytes() <= capacity;
}

// Offload moves state only off a GPU, and only a sharded strategy has it.
bool can_offload(const RunConfig& run) {
  return run.run.device == Device::kCuda && run.parallel.offload_optimizer != OffloadDevice::kCpu &&
         run.parallel.strategy != StrategyKind::kDdp &&
         !(run.parallel.strategy == StrategyKind::kFsdp &&
           run.parallel.fsdp.sharding_strategy == FsdpShardingStrategy::kNoShard);
}

// The largest batch in [1, 2^40) that fits (activations grow with it), 0
// when none does, MemoryVerdict::kNoLimitFound when all do (the cap is the
// search's, not the memory's).
int64_t largest_batch(RunConfig run, const EncoderConfig& model, int world_size, double capacity) {
  run.train.batch_size = 1;
  if (!fits(run, model, world_size, capacity)) return 0;
  int64_t good = 1, bad = int64_t{1} << 40;
  bool limit_found = false;
  for (int64_t b = 2; b < bad; b *= 2) {
    run.train.batch_size = b;
    if (!fits(run, model, world_size, capacity)) {
      bad = b;
      limit_found = true;
      break;
    }
    good = b;
  }
  if (!limit_found) {
    run.train.batch_size = bad - 1;
    if (fits(run, model, world_size, capacity)) return MemoryVerdict::kNoLimitFound;
  }
  while (bad - good > 1) {
    const int64_t mid = good + (bad - good) / 2;
    run.train.batch_size = mid;
    (fits(run, model, world_size, capacity) ? good : bad) = mid;
  }
  return good;
}

std::string json_number(double v) { return std::isfinite(v) ? str_format("%.0f", v) : "null"; }

// 296.4 K, 108.0 M, or the number itself below a thousand.
std::string fit_count_text(int64_t n) {
  const double v = static_cast<double>(n);
  if (n >= 1000000) return str_format("%.1f M", v / 1e6);
  if (n >= 1000) return str_format("%.1f K", v / 1e3);
  return std::to_string(n);
}

}  // namespace

std::string MemoryVerdict::text() const {
  switch (kind) {
    case kFits: return "fits";
    case kFitsWithCheckpointing: return "fits with model.gradient_checkpointing";
    case kFitsWithOffload: return "fits with parallel.offload_optimizer = \"cpu\"";
    case kFitsWithBoth: return "fits with gradient checkpointing and optimizer offload";
    case kDoesNotFit: break;
  }
  return "does not fit";
}

MemoryVerdict judge_memory(const RunConfig& run, const EncoderConfig& model, int world_size, double capacity) {
  MemoryVerdict v;
  v.largest_batch = largest_batch(run, model, world_size, capacity);
  RunConfig checkpointed = run;
  checkpointed.model.gradient_checkpointing = true;
  RunConfig offloaded = run;
  offloaded.parallel.offload_optimizer = OffloadDevice::kCpu;
  RunConfig both = offloaded;
  both.model.gradient_checkpointing = true;
  const bool ckpt = !run.model.gradient_checkpointing;
  if (fits(run, model, world_size, capacity))
    v.kind = MemoryVerdict::kFits;
  else if (ckpt && fits(checkpointed, model, world_size, capacity))
    v.kind = MemoryVerdict::kFitsWithCheckpointing;
  else if (can_offload(run) && fits(offloaded, model, world_size, capacity))
    v.kind = MemoryVerdict::kFitsWithOffload;
  else if (ckpt && can_offload(run) && fits(both, model, world_size, capacity))
    v.kind = MemoryVerdict::kFitsWithBoth;
  return v;
}

std::string describe_estimate(const MemoryEstimate& e) {
  const std::string lora =
      e.lora() ? str_format(", LoRA r %lld: %s parameters trained, %s frozen", static_cast<long long>(e.lora_r),
                            fit_count_text(e.num_parameters).c_str(), fit_count_text(e.num_frozen_parameters).c_str())
               : "";
  std::string text = str_format("memory per rank (estimate, %s, %d ranks, %s%s): parameters %s, gradients %s, optimizer "
                                "states %s",
                                e.strategy.c_str(), e.world_size, e.precision.c_str(), lora.c_str(),
                                format_bytes(e.param_bytes).c_str(), format_bytes(e.grad_bytes).c_str(),
                                format_bytes(e.optimizer_bytes).c_str());
  if (e.host_bytes > 0) text += " (+ " + format_bytes(e.host_bytes) + " in host memory: optimizer offload)";
  if (e.lora()) {
    text += ", frozen base " + format_bytes(e.frozen_bytes) + " (parameters only, " +
            (e.frozen_sharded ? str_format("this rank's shard of %d, up to %s more gathered)", e.shard_group,
                                           format_bytes(e.frozen_gathered_bytes).c_str())
                              : std::string("whole on every rank)"));
  }
  if (e.gathered_bytes > 0) text += ", gathered units " + format_bytes(e.gathered_bytes);
  if (e.comm_bytes > 0) text += ", communication buffers " + format_bytes(e.comm_bytes);
  text += str_format(", activations %s (batch %lld x %lld tokens%s), total %s", format_bytes(e.activations.peak_bytes).c_str(),
                     static_cast<long long>(e.batch_size), static_cast<long long>(e.seq_len),
                     e.checkpointing ? ", gradient checkpointing" : "", format_bytes(e.total_bytes()).c_str());
  return text;
}

std::string estimate_to_json(const MemoryEstimate& e, const std::optional<MemoryVerdict>& verdict) {
  std::string j = "{\"strategy\":\"" + e.strategy + "\",\"world_size\":" + std::to_string(e.world_size) +
                  ",\"shard_group\":" + std::to_string(e.shard_group) + ",\"mixed_precision\":\"" + e.precision +
                  "\",\"device\":\"" + (e.device_is_cpu ? "cpu" : "cuda") + "\",\"offload_optimizer\":" +
                  (e.offload ? "true" : "false") + ",\"num_parameters\":" + std::to_string(e.num_parameters) +
                  ",\"batch_size\":" + std::to_string(e.batch_size) + ",\"seq_len\":" + std::to_string(e.seq_len) +
                  ",\"gradient_checkpointing\":" + (e.checkpointing ? "true" : "false");
  auto add = [&j](const char* key, double v) { j += std::string(",\"") + key + "\":" + json_number(v); };
  j += std::string(",\"lora_r\":") + std::to_string(e.lora_r);
  if (e.lora()) {
    j += ",\"lora_target_modules\":" + nlohmann::json(e.lora_target_modules).dump() +
         ",\"num_frozen_parameters\":" + std::to_string(e.num_frozen_parameters) +
         ",\"frozen_sharded\":" + (e.frozen_sharded ? "true" : "false");
  }
  add("param_bytes", e.param_bytes);
  add("grad_bytes", e.grad_bytes);
  add("optimizer_bytes", e.optimizer_bytes);
  add("host_bytes", e.host_bytes);
  add("model_states_bytes", e.model_states_bytes());
  add("frozen_bytes", e.frozen_bytes);
  add("frozen_gathered_bytes", e.frozen_gathered_bytes);
  j += ",\"largest_unit\":\"" + e.largest_unit + "\",\"largest_unit_numel\":" + std::to_string(e.largest_unit_numel);
  add("gathered_bytes", e.gathered_bytes);
  add("comm_bytes", e.comm_bytes);
  add("activation_bytes", e.activations.peak_bytes);
  add("activation_plain_bytes", e.activations_plain.peak_bytes);
  add("activation_checkpointed_bytes", e.activations_checkpointed.peak_bytes);
  add("total_bytes", e.total_bytes());
  if (verdict) {
    j += ",\"verdict\":\"" + verdict->text() + "\"";
    j += ",\"largest_batch\":" + (verdict->largest_batch == MemoryVerdict::kNoLimitFound
                                         ? std::string("null,\"largest_batch_note\":\"no limit found\"")
                                         : std::to_string(verdict->largest_batch));
  }
  return j + "}";
}

void check_estimate_fits(const RunConfig& run, const EncoderConfig& model, int world_size, int ranks_on_node,
                         double capacity, const std::string& what) {
  const MemoryEstimate e = estimate_memory(run, model, world_size);
  const double ranks = std::max(1, ranks_on_node);
  const double per_rank = capacity / ranks;
  if (e.total_bytes() <= per_rank) return;
  std::vector<std::string> ways;
  const MemoryVerdict v = judge_memory(run, model, world_size, per_rank);
  if (v.kind != MemoryVerdict::kDoesNotFit) ways.push_back(v.text().substr(std::string("fits with ").size()));
  // Other strategies, as configured otherwise.
  for (StrategyKind kind : {StrategyKind::kZero1, StrategyKind::kZero2, StrategyKind::kZero3}) {
    if (kind == run.parallel.strategy) continue;
    RunConfig other = run;
    other.parallel.strategy = kind;
    try {
      if (estimate_memory(other, model, world_size).total_bytes() <= per_rank)
        ways.push_back(std::string("parallel.strategy = \"") + enum_name(kind) + "\"");
    } catch (const Error&) {
    }
  }
  if (v.largest_batch > 0 && v.largest_batch < run.train.batch_size)
    ways.push_back(str_format("train.batch_size <= %lld (raise train.gradient_accumulation_steps to keep the global "
                              "batch)",
                              static_cast<long long>(v.largest_batch)));
  std::string advice;
  for (const std::string& w : ways) advice += (advice.empty() ? "" : "; or ") + w;
  const std::string message =
      describe_estimate(e) + (ranks > 1 ? str_format(" (x %d ranks on this node)", ranks_on_node) : "") +
      ": more than the " + format_bytes(capacity) + " of " + what + ". " +
      (advice.empty() ? "Nothing shardtrain can change fits: use a smaller model, shorter data.max_length, "
                        "more ranks, or a larger machine"
                      : "What would fit: " + advice) +
      ".";
  // The estimate is an estimate (an upper bound where a fused GPU attention
  // kernel keeps less, docs/DESIGN.md "Memory estimate"): the user may start
  // the job anyway.
  if (!run.run.memory_check) {
    log_warn("%s run.memory_check = false: starting it anyway.", message.c_str());
    return;
  }
  throw Error(message + " (To start it anyway: run.memory_check = false.)");
}

}  // namespace shardtrain
