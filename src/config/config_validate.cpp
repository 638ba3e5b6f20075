// The checks of a resolved run config (config/config.h's
// validate_run_config): ranges, choices and combinations, each naming the key.
#include "shardtrain/config/config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <system_error>

#include "config/config_values.h"
#include "shardtrain/config/deepspeed_config.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/limits.h"
#include "shardtrain/core/log.h"
#include "shardtrain/optim/schedule.h"
#include "shardtrain/tasks/task_rules.h"

namespace shardtrain {
using namespace config_detail;

namespace {

// The checks validate_run_config() makes, each throwing an Error that names
// the key and prints its value as the user wrote it (integers as integers).
void require(bool ok, const std::string& message) {
  if (!ok) throw Error(message);
}
void positive(const char* key, double value) {
  require(value > 0, std::string(key) + " = " + format_double(value) + ": must be > 0");
}
void positive(const char* key, int64_t value) {
  require(value > 0, std::string(key) + " = " + std::to_string(value) + ": must be > 0");
}
void non_negative(const char* key, double value) {
  require(value >= 0, std::string(key) + " = " + format_double(value) + ": must be >= 0");
}
void non_negative(const char* key, int64_t value) {
  require(value >= 0, std::string(key) + " = " + std::to_string(value) + ": must be >= 0");
}
void probability(const char* key, double value) {
  require(value >= 0 && value < 1, std::string(key) + " = " + format_double(value) + ": must be in [0, 1)");
}

void validate_model(const ModelConfig& m) {
  if (m.init == ModelInit::kPretrained) {
    require(!m.path.empty(),
            "model.init = \"pretrained\" needs model.path (a HF model folder); for a random model set "
            "model.init = \"random\" and model.config");
  } else {
    require(!m.config.empty() || !m.path.empty(),
            "model.init = \"random\" needs model.config (a HF config.json) or model.path");
  }
  if (!m.path.empty()) require(is_dir(m.path), "model.path = " + quote(m.path) + ": no such directory");
  if (!m.config.empty()) require(is_file(m.config), "model.config = " + quote(m.config) + ": no such file");
  require(!m.vocab.empty(),
          "model.vocab: needed when model.path is not set (a vocab.txt, a tokenizer.json, or a tokenizer folder)");
  require(is_file(m.vocab) || is_dir(m.vocab), "model.vocab = " + quote(m.vocab) + ": no such file or folder");
  // As `tokenize --lowercase`: the override applies to a vocab.txt only; a
  // tokenizer.json or a folder says itself whether it lowercases.
  if (m.lowercase && (is_dir(m.vocab) || extension_of(m.vocab) == "json"))
    throw Error("model.lowercase = true goes with a vocab.txt file, but the tokenizer is " +
                (is_dir(m.vocab) ? "the folder " + quote(m.vocab) +
                                       (m.vocab == m.path ? " (model.path's own: tokenizer.json, or vocab.txt with "
                                                            "tokenizer_config.json)"
                                                          : "")
                                 : "the tokenizer.json " + quote(m.vocab)) +
                ", which says itself whether it lowercases; set do_lower_case in its tokenizer_config.json (or its "
                "normalizer), or leave model.lowercase out");
  non_negative("model.num_labels", m.num_labels);
  require(m.num_labels <= kMaxNumLabels, "model.num_labels = " + std::to_string(m.num_labels) + ": more than the " +
                                             std::to_string(kMaxNumLabels) + " labels a classifier may have");
  if (m.hidden_dropout_prob) probability("model.hidden_dropout_prob", *m.hidden_dropout_prob);
  if (m.attention_probs_dropout_prob) probability("model.attention_probs_dropout_prob", *m.attention_probs_dropout_prob);
}

void validate_data(const DataConfig& d) {
  require(!d.train_file.empty(), "data.train_file: not set (the training data file)");
  require(is_file(d.train_file), "data.train_file = " + quote(d.train_file) + ": no such file");
  if (!d.eval_file.empty()) require(is_file(d.eval_file), "data.eval_file = " + quote(d.eval_file) + ": no such file");
  require(d.max_length >= kMinSequenceLength && d.max_length <= kMaxSequenceLength,
          "data.max_length = " + std::to_string(d.max_length) + ": must be in [" + std::to_string(kMinSequenceLength) +
              ", " + std::to_string(kMaxSequenceLength) + "] ([CLS] and two [SEP] need 3 tokens)");
}

// The data keys of one task, against model.task: the task's own rules, and
// no key another task owns changed from its default (a printed config lists
// every key, at its default).
void validate_task(const RunConfig& config) {
  const Task task = config.model.task;
  // Each key's value as printed, and its default's.
  std::map<std::string, std::string> printed, default_printed;
  auto print_into = [](std::map<std::string, std::string>& into) {
    return [&into](const char* name, const auto& field, const char*) {
      using Field = std::decay_t<decltype(field)>;
      if constexpr (std::is_same_v<Field, std::optional<double>>)
        into[name] = field ? toml_value(*field) : "";
      else
        into[name] = toml_value(field);
    };
  };
  visit_config_keys(config, print_into(printed));
  const RunConfig fresh;
  visit_config_keys(fresh, print_into(default_printed));
  for (const Task other : all_tasks()) {
    if (other == task) continue;
    for (const std::string& key : task_rules(other).own_keys())
      require(printed.at(key) == default_printed.at(key),
              key + " only applies when model.task = \"" + enum_name(other) + "\" (it is \"" + enum_name(task) +
                  "\")");
  }
  task_rules(task).validate(config.model, config.data);
}

void validate_train(const TrainConfig& t, const JobConfig& run) {
  require(t.num_epochs >= 1 || t.max_steps > 0,
          "train.num_epochs = " + std::to_string(t.num_epochs) + ": must be >= 1 (or set train.max_steps)");
  non_negative("train.max_steps", t.max_steps);
  positive("train.lr", t.lr);
  non_negative("train.weight_decay", t.weight_decay);
  probability("train.adam_beta1", t.adam_beta1);
  probability("train.adam_beta2", t.adam_beta2);
  positive("train.adam_epsilon", t.adam_epsilon);
  non_negative("train.warmup_steps", t.warmup_steps);
  require(t.warmup_ratio >= 0 && t.warmup_ratio <= 1,
          "train.warmup_ratio = " + format_double(t.warmup_ratio) + ": must be in [0, 1]");
  require(!(t.warmup_steps > 0 && t.warmup_ratio > 0),
          "train.warmup_steps and train.warmup_ratio are both set; set only one");
  positive("train.batch_size", t.batch_size);
  positive("train.eval_batch_size", t.eval_batch_size);
  positive("train.gradient_accumulation_steps", t.gradient_accumulation_steps);
  non_negative("train.max_grad_norm", t.max_grad_norm);
  non_negative("train.seed", t.seed);
  non_negative("train.eval_every_steps", t.eval_every_steps);
  positive("train.log_every_steps", t.log_every_steps);
  if (t.mixed_precision == Precision::kFp16)
    require(run.device == Device::kCuda,
            "train.mixed_precision = \"fp16\" needs run.device = \"cuda\" (fp16 with loss scaling is a GPU "
            "mode; LibTorch's CPU kernels have no fp16 matmul); on CPU use train.mixed_precision = \"bf16\"");
  const Fp16Config& f = t.fp16;
  non_negative("train.fp16.loss_scale", f.loss_scale);
  require(f.initial_scale_power >= 0 && f.initial_scale_power <= 63,
          "train.fp16.initial_scale_power = " + std::to_string(f.initial_scale_power) + ": must be in [0, 63]");
  positive("train.fp16.loss_scale_window", f.loss_scale_window);
  positive("train.fp16.hysteresis", f.hysteresis);
  non_negative("train.fp16.min_loss_scale", f.min_loss_scale);
}

// FSDP's MixedPrecision dtypes, against the strategy and the device.
void validate_fsdp_dtypes(const ParallelConfig& p, const TrainConfig& t, const JobConfig& run) {
  if (p.strategy != StrategyKind::kFsdp) return;  // validate_parallel refuses changed fsdp keys elsewhere
  const char* base = enum_name(t.mixed_precision);
  auto resolved = [&](DtypeSetting c) {
    return c != DtypeSetting::kAuto ? std::string(enum_name(c))
                                   : t.mixed_precision == Precision::kNo ? std::string("fp32") : std::string(base);
  };
  const std::string param = resolved(p.fsdp.param_dtype), reduce = resolved(p.fsdp.reduce_dtype);
  require(param != "fp16" || run.device == Device::kCuda,
          "parallel.fsdp.param_dtype = \"fp16\" needs run.device = \"cuda\"; on CPU use \"bf16\"");
  require(reduce == "fp32" || reduce == param,
          "parallel.fsdp.reduce_dtype = \"" + reduce + "\" with param_dtype \"" + param +
              "\": gradients are reduced in the parameters' dtype or in fp32; set reduce_dtype to \"" + param +
              "\" or \"fp32\"");
  require(reduce == param || p.fsdp.sharding_strategy != FsdpShardingStrategy::kNoShard,
          "parallel.fsdp.reduce_dtype = \"fp32\" with param_dtype \"" + param +
              "\" needs a sharded FSDP strategy (FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD): NO_SHARD reduces in "
              "the parameters' dtype");
}

// A printed config writes every key, so for the keys below only a changed
// value counts as set.
void validate_parallel(const ParallelConfig& p, const std::set<std::string>& keys_set) {
  non_negative("parallel.ranks_per_node", p.ranks_per_node);
  positive("parallel.bucket_cap_mb", p.bucket_cap_mb);
  // A DeepSpeed JSON's values were checked against the keys set here when it
  // was applied (config/deepspeed_config.h): a contradiction names both.
  if (!p.deepspeed_config.empty())
    require(is_file(p.deepspeed_config), "parallel.deepspeed_config = " + quote(p.deepspeed_config) + ": no such file");
  const ZeroConfig& z = p.zero;
  non_negative("parallel.zero.reduce_bucket_size", z.reduce_bucket_size);
  non_negative("parallel.zero.allgather_bucket_size", z.allgather_bucket_size);
  non_negative("parallel.zero.stage3_prefetch_bucket_size", z.stage3_prefetch_bucket_size);
  non_negative("parallel.zero.stage3_param_persistence_threshold", z.stage3_param_persistence_threshold);
  const ZeroConfig zero_defaults;
  const StrategyKind strategy = p.strategy;
  const bool sharded = strategy == StrategyKind::kZero1 || strategy == StrategyKind::kZero2 ||
                       strategy == StrategyKind::kZero3 || strategy == StrategyKind::kHybrid;
  const bool params_sharded = strategy == StrategyKind::kZero3 || strategy == StrategyKind::kHybrid;
  auto only_for = [&](const char* key, bool same, bool applies, const char* strategies) {
    require(same || !keys_set.count(key) || applies,
            std::string(key) + " only applies when parallel.strategy is " + strategies + " (it is \"" +
                enum_name(strategy) + "\")" + (strategy == StrategyKind::kFsdp ? "; for fsdp use parallel.fsdp.*" : ""));
  };
  const char* kSharded = "\"zero1\", \"zero2\", \"zero3\" or \"hybrid\"";
  const char* kParamsSharded = "\"zero3\" or \"hybrid\" (parameters are sharded only there)";
  only_for("parallel.zero.overlap_comm", z.overlap_comm == zero_defaults.overlap_comm, sharded, kSharded);
  only_for("parallel.zero.reduce_bucket_size", z.reduce_bucket_size == zero_defaults.reduce_bucket_size, sharded,
           kSharded);
  only_for("parallel.zero.allgather_bucket_size", z.allgather_bucket_size == zero_defaults.allgather_bucket_size,
           sharded, kSharded);
  only_for("parallel.zero.contiguous_gradients", z.contiguous_gradients == zero_defaults.contiguous_gradients, sharded,
           kSharded);
  only_for("parallel.zero.round_robin_gradients", z.round_robin_gradients == zero_defaults.round_robin_gradients,
           sharded, kSharded);
  only_for("parallel.zero.stage3_prefetch_bucket_size",
           z.stage3_prefetch_bucket_size == zero_defaults.stage3_prefetch_bucket_size, params_sharded, kParamsSharded);
  only_for("parallel.zero.stage3_param_persistence_threshold",
           z.stage3_param_persistence_threshold == zero_defaults.stage3_param_persistence_threshold, params_sharded,
           kParamsSharded);
  only_for("parallel.zero.gather_16bit_weights_on_model_save",
           z.gather_16bit_weights_on_model_save == zero_defaults.gather_16bit_weights_on_model_save, params_sharded,
           kParamsSharded);
  // Two names for one bucket size: refuse a changed bucket_cap_mb next to reduce_bucket_size.
  require(z.reduce_bucket_size == 0 || !keys_set.count("parallel.bucket_cap_mb") ||
              p.bucket_cap_mb == ParallelConfig().bucket_cap_mb,
          "parallel.zero.reduce_bucket_size and parallel.bucket_cap_mb are both set (two sizes for the gradient "
          "buckets); keep one");
  if (strategy == StrategyKind::kFsdp) return;
  const FsdpConfig fsdp_defaults;
  auto unchanged = [&](const char* key, bool same) {
    require(same || !keys_set.count(key), std::string(key) + " only applies when parallel.strategy = \"fsdp\" (it is \"" +
                                              enum_name(strategy) + "\")");
  };
  unchanged("parallel.fsdp.sharding_strategy", p.fsdp.sharding_strategy == fsdp_defaults.sharding_strategy);
  unchanged("parallel.fsdp.state_dict_type", p.fsdp.state_dict_type == fsdp_defaults.state_dict_type);
  unchanged("parallel.fsdp.offload_to_cpu", p.fsdp.offload_to_cpu == fsdp_defaults.offload_to_cpu);
  unchanged("parallel.fsdp.rank0_only", p.fsdp.rank0_only == fsdp_defaults.rank0_only);
  unchanged("parallel.fsdp.backward_prefetch", p.fsdp.backward_prefetch == fsdp_defaults.backward_prefetch);
  unchanged("parallel.fsdp.forward_prefetch", p.fsdp.forward_prefetch == fsdp_defaults.forward_prefetch);
  unchanged("parallel.fsdp.param_dtype", p.fsdp.param_dtype == fsdp_defaults.param_dtype);
  unchanged("parallel.fsdp.reduce_dtype", p.fsdp.reduce_dtype == fsdp_defaults.reduce_dtype);
  unchanged("parallel.fsdp.buffer_dtype", p.fsdp.buffer_dtype == fsdp_defaults.buffer_dtype);
}

void validate_early_stopping(const TrainConfig& t, const CheckpointConfig& k) {
  non_negative("train.early_stopping_patience", t.early_stopping_patience);
  non_negative("train.early_stopping_threshold", t.early_stopping_threshold);
  require(t.early_stopping_patience == 0 || !k.score_attribute.empty(),
          "train.early_stopping_patience = " + std::to_string(t.early_stopping_patience) +
              " needs checkpoint.score_attribute (the metric that must improve, e.g. \"eval_mcc\") and "
              "checkpoint.score_order");
}

void validate_checkpoint(const CheckpointConfig& k, const DataConfig& d) {
  non_negative("checkpoint.every_steps", k.every_steps);
  non_negative("checkpoint.every_epochs", k.every_epochs);
  non_negative("checkpoint.num_to_keep", k.num_to_keep);
  require(k.preemption_grace_s >= 0 && k.preemption_grace_s <= 86400,
          str_format("checkpoint.preemption_grace_s = %g: must be 0 (off) to 86400 s; set it below the time the "
                     "scheduler leaves between SIGTERM and SIGKILL (Slurm: KillWait, GraceTime, --signal=TERM@N)",
                     k.preemption_grace_s));
  if (k.score_attribute.empty()) return;
  const auto& names = known_metric_names();
  require(std::find(names.begin(), names.end(), k.score_attribute) != names.end(),
          "checkpoint.score_attribute = " + quote(k.score_attribute) + ": allowed values are " + quoted_list(names));
  if (k.score_attribute.rfind("eval_", 0) == 0)
    require(!d.eval_file.empty(), "checkpoint.score_attribute = " + quote(k.score_attribute) +
                                      " needs data.eval_file (there is nothing to evaluate)");
}

void validate_run(const JobConfig& r) {
  require(!r.storage_path.empty(), "run.storage_path: must not be empty");
  require(r.name.find('/') == std::string::npos && r.name != "." && r.name != "..",
          "run.name = " + quote(r.name) + ": must be a plain folder name (no '/')");
  require(r.max_failures >= -1,
          str_format("run.max_failures must be -1 (no limit) or >= 0, got %lld", static_cast<long long>(r.max_failures)));
  positive("run.collective_timeout_s", r.collective_timeout_s);
  // Deadlines are steady_clock nanoseconds (int64): 1e7 s (115 days) is far
  // inside them and longer than any job.
  require(r.collective_timeout_s <= 1e7,
          str_format("run.collective_timeout_s = %g: at most 1e7 s (115 days)", r.collective_timeout_s));
#ifndef SHARDTRAIN_HAVE_NCCL
  require(r.device != Device::kCuda,
          "run.device = \"cuda\": this build of shardtrain has no CUDA/NCCL support; rebuild with the CUDA "
          "toolkit and NCCL installed, or use run.device = \"cpu\"");
#endif
}

}  // namespace

void validate_run_config(const RunConfig& c, const std::set<std::string>& keys_set) {
  validate_model(c.model);
  validate_data(c.data);
  validate_task(c);
  validate_train(c.train, c.run);
  validate_lr_schedule_config(c.train, keys_set);
  validate_parallel(c.parallel, keys_set);
  validate_fsdp_dtypes(c.parallel, c.train, c.run);
  validate_checkpoint(c.checkpoint, c.data);
  validate_early_stopping(c.train, c.checkpoint);
  validate_run(c.run);
}

}  // namespace shardtrain
