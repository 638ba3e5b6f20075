// Enum names: the config keys whose value is one of a fixed set of names
// (parallel.strategy = "zero3", run.device = "cuda", ...) are enums in the
// program, and each enum has one table of the names users write. The config
// parser turns a name into the enum once (config/config.h); everything after it
// compares enums, never strings. Printing a config writes the same names back.
//
//   StrategyKind kind = parse_enum<StrategyKind>("zero3", "parallel.strategy");  // Error naming the key otherwise
//   const char* name = enum_name(kind);                                            // "zero3"
//   std::vector<std::string> all = enum_names<StrategyKind>();                     // for --help and messages
//
// Adding a value: add the enumerator and its name in the table below (the
// table order is the order --help lists them in). ("Choice" is kept for
// multiple choice, the task.)
#pragma once

#include <array>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardtrain/core/task_list.h"

namespace shardtrain {

enum class ModelInit { kPretrained, kRandom };
// What the model is fine-tuned for (model.task): transformers' AutoModelFor<Task> classes.
// One enumerator per row of core/task_list.h, in its order.
enum class Task {
#define SHARDTRAIN_TASK_ENUMERATOR(id, folder) id,
  SHARDTRAIN_TASKS(SHARDTRAIN_TASK_ENUMERATOR)
#undef SHARDTRAIN_TASK_ENUMERATOR
};
// Column layouts of well-known multiple-choice data sets (data.preset).
enum class DataPreset { kNone, kSwag, kCopa };
enum class FileFormat { kAuto, kTsv, kCsv, kJsonl, kConll };
enum class BadRowPolicy { kError, kSkip };
enum class Precision { kNo, kBf16, kFp16 };
enum class StrategyKind { kDdp, kZero1, kZero2, kZero3, kFsdp, kHybrid };
enum class OffloadDevice { kNone, kCpu };
enum class FsdpShardingStrategy { kFullShard, kShardGradOp, kNoShard, kHybridShard };
enum class FsdpStateDictType { kFullStateDict, kShardedStateDict };
enum class BackwardPrefetch { kBackwardPre, kBackwardPost, kNoPrefetch };
enum class ScoreOrder { kMax, kMin };
// A dtype a key may name (FSDP's MixedPrecision fields); kAuto: follow
// train.mixed_precision, as Accelerate fills them.
enum class DtypeSetting { kAuto, kFp32, kBf16, kFp16 };
enum class Device { kCpu, kCuda };
// transformers' lr_scheduler_type names, then DeepSpeed's scheduler types (optim/schedule.h).
enum class LrSchedulerType {
  kLinear, kCosine, kCosineWithRestarts, kPolynomial, kConstant, kConstantWithWarmup,
  kInverseSqrt, kCosineWithMinLr, kWarmupStableDecay,
  kWarmupLR, kWarmupDecayLR, kWarmupCosineLR
};
enum class WsdDecayType { kCosine, kLinear, kOneMinusSqrt };  // transformers' get_wsd_schedule decay_type
enum class WarmupType { kLog, kLinear };  // DeepSpeed's warmup_type
// lora.init: PEFT's init_lora_weights (True: A Kaiming-uniform; "gaussian": A ~ N(0, 1/r)); B is zeros in both.
enum class LoraInit { kDefault, kGaussian };

// EnumNames<E>::entries: every enumerator with the name users write, in
// --help order. Only the enums above have one.
template <class E>
struct EnumNames;

#define ST_ENUM_NAMES(Enum, ...)                                                            \
  template <>                                                                           \
  struct EnumNames<Enum> {                                                            \
    static constexpr std::pair<Enum, const char*> entries[] = {__VA_ARGS__};            \
  }

ST_ENUM_NAMES(ModelInit, {ModelInit::kPretrained, "pretrained"}, {ModelInit::kRandom, "random"});
ST_ENUM_NAMES(FileFormat, {FileFormat::kAuto, "auto"}, {FileFormat::kTsv, "tsv"}, {FileFormat::kCsv, "csv"},
           {FileFormat::kJsonl, "jsonl"}, {FileFormat::kConll, "conll"});
// model.task names a task by its folder (core/task_list.h).
#define SHARDTRAIN_TASK_NAME(id, folder) {Task::id, #folder},
ST_ENUM_NAMES(Task, SHARDTRAIN_TASKS(SHARDTRAIN_TASK_NAME));
#undef SHARDTRAIN_TASK_NAME
ST_ENUM_NAMES(DataPreset, {DataPreset::kNone, "none"}, {DataPreset::kSwag, "swag"}, {DataPreset::kCopa, "copa"});
ST_ENUM_NAMES(BadRowPolicy, {BadRowPolicy::kError, "error"}, {BadRowPolicy::kSkip, "skip"});
ST_ENUM_NAMES(Precision, {Precision::kNo, "no"}, {Precision::kBf16, "bf16"}, {Precision::kFp16, "fp16"});
ST_ENUM_NAMES(StrategyKind, {StrategyKind::kDdp, "ddp"}, {StrategyKind::kZero1, "zero1"},
           {StrategyKind::kZero2, "zero2"}, {StrategyKind::kZero3, "zero3"}, {StrategyKind::kFsdp, "fsdp"},
           {StrategyKind::kHybrid, "hybrid"});
ST_ENUM_NAMES(OffloadDevice, {OffloadDevice::kNone, "none"}, {OffloadDevice::kCpu, "cpu"});
ST_ENUM_NAMES(FsdpShardingStrategy, {FsdpShardingStrategy::kFullShard, "FULL_SHARD"},
           {FsdpShardingStrategy::kShardGradOp, "SHARD_GRAD_OP"}, {FsdpShardingStrategy::kNoShard, "NO_SHARD"},
           {FsdpShardingStrategy::kHybridShard, "HYBRID_SHARD"});
ST_ENUM_NAMES(FsdpStateDictType, {FsdpStateDictType::kFullStateDict, "FULL_STATE_DICT"},
           {FsdpStateDictType::kShardedStateDict, "SHARDED_STATE_DICT"});
ST_ENUM_NAMES(BackwardPrefetch, {BackwardPrefetch::kBackwardPre, "BACKWARD_PRE"},
           {BackwardPrefetch::kBackwardPost, "BACKWARD_POST"}, {BackwardPrefetch::kNoPrefetch, "NO_PREFETCH"});
ST_ENUM_NAMES(ScoreOrder, {ScoreOrder::kMax, "max"}, {ScoreOrder::kMin, "min"});
// torch's names are accepted too (the first name of each is the one printed).
ST_ENUM_NAMES(DtypeSetting, {DtypeSetting::kAuto, "auto"}, {DtypeSetting::kFp32, "fp32"}, {DtypeSetting::kBf16, "bf16"},
           {DtypeSetting::kFp16, "fp16"}, {DtypeSetting::kFp32, "float32"}, {DtypeSetting::kBf16, "bfloat16"},
           {DtypeSetting::kFp16, "float16"});
ST_ENUM_NAMES(Device, {Device::kCpu, "cpu"}, {Device::kCuda, "cuda"});
ST_ENUM_NAMES(LrSchedulerType, {LrSchedulerType::kLinear, "linear"}, {LrSchedulerType::kCosine, "cosine"},
           {LrSchedulerType::kCosineWithRestarts, "cosine_with_restarts"},
           {LrSchedulerType::kPolynomial, "polynomial"}, {LrSchedulerType::kConstant, "constant"},
           {LrSchedulerType::kConstantWithWarmup, "constant_with_warmup"},
           {LrSchedulerType::kInverseSqrt, "inverse_sqrt"}, {LrSchedulerType::kCosineWithMinLr, "cosine_with_min_lr"},
           {LrSchedulerType::kWarmupStableDecay, "warmup_stable_decay"}, {LrSchedulerType::kWarmupLR, "WarmupLR"},
           {LrSchedulerType::kWarmupDecayLR, "WarmupDecayLR"}, {LrSchedulerType::kWarmupCosineLR, "WarmupCosineLR"});
ST_ENUM_NAMES(LoraInit, {LoraInit::kDefault, "default"}, {LoraInit::kGaussian, "gaussian"}, {LoraInit::kDefault, "true"});
ST_ENUM_NAMES(WarmupType, {WarmupType::kLog, "log"}, {WarmupType::kLinear, "linear"});
ST_ENUM_NAMES(WsdDecayType, {WsdDecayType::kCosine, "cosine"}, {WsdDecayType::kLinear, "linear"},
           {WsdDecayType::kOneMinusSqrt, "1-sqrt"});

#undef ST_ENUM_NAMES

// True for the enums above (the config code treats them as choice fields).
template <class T, class = void>
struct is_named_enum : std::false_type {};
template <class T>
struct is_named_enum<T, std::void_t<decltype(EnumNames<T>::entries)>> : std::true_type {};
template <class T>
inline constexpr bool is_named_enum_v = is_named_enum<T>::value;

template <class E>
const char* enum_name(E value) {
  for (const auto& entry : EnumNames<E>::entries)
    if (entry.first == value) return entry.second;
  return "?";  // unreachable for a valid enumerator
}

template <class E>
std::vector<std::string> enum_names() {
  std::vector<std::string> names;
  for (const auto& entry : EnumNames<E>::entries) names.emplace_back(entry.second);
  return names;
}

// The enumerator named `name`, or nullopt.
template <class E>
std::optional<E> find_enum(const std::string& name) {
  for (const auto& entry : EnumNames<E>::entries)
    if (name == entry.second) return entry.first;
  return std::nullopt;
}

// `"a", "b", "c"` for messages.
std::string quoted_list(const std::vector<std::string>& names);

// The enumerator named `name`; throws shardtrain::Error naming `key` and the
// allowed names otherwise.
[[noreturn]] void throw_bad_enum_name(const std::string& key, const std::string& name,
                                   const std::vector<std::string>& allowed);
template <class E>
E parse_enum(const std::string& name, const std::string& key) {
  if (const std::optional<E> value = find_enum<E>(name)) return *value;
  throw_bad_enum_name(key, name, enum_names<E>());
}

}  // namespace shardtrain
