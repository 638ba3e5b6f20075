// RunConfig: everything a run needs to know, as plain structs.
//
// One TOML file with the sections below configures a run; every key can also be
// set on the command line as `--section.key value` (command line wins). The
// file is parsed and validated once, by cli/config.h; the rest of the program
// only reads these structs. visit_config_keys() below is the single list of
// keys: it drives parsing, `--help`, validation messages and the resolved
// config printed at start and saved with every run.
//
// Relative paths are relative to the directory the job is started from.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace shardtrain {

struct ModelConfig {
  std::string path;              // HF model folder: config.json, vocab.txt, model.safetensors
  std::string config;            // HF config.json for a randomly initialised model
  std::string init = "pretrained";  // pretrained | random
  std::string vocab;             // vocab.txt; default <path>/vocab.txt
  bool lowercase = false;        // uncased vocabulary (tokenizer_config.json in model.path wins)
  int64_t num_labels = 0;        // 0 = from the training data's labels
  std::optional<double> hidden_dropout_prob;           // unset = the model config's value
  std::optional<double> attention_probs_dropout_prob;  // unset = the model config's value
};

struct DataConfig {
  std::string train_file;
  std::string eval_file;
  std::string format = "auto";   // tsv | csv | jsonl | auto (from the file extension)
  std::string text_a = "#1 String";  // column name or 0-based index
  std::string text_b = "#2 String";  // empty = single-sentence task
  std::string label = "Quality";
  int64_t max_length = 128;
  std::string on_bad_row = "error";  // error | skip
  bool drop_last = false;        // train: drop the incomplete last global batch instead of padding it
  bool group_by_length = false;  // train: batch rows of similar length (changes batch composition; data/sampler.h)
};

struct TrainConfig {
  int64_t num_epochs = 3;
  int64_t max_steps = 0;         // optimizer steps; 0 = run all epochs
  double lr = 2e-5;
  double weight_decay = 0.01;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_epsilon = 1e-8;
  int64_t warmup_steps = 0;
  double warmup_ratio = 0.0;
  int64_t batch_size = 16;       // per rank, per micro-step
  int64_t eval_batch_size = 32;  // per rank
  int64_t gradient_accumulation_steps = 1;
  double max_grad_norm = 1.0;    // 0 = no clipping
  int64_t seed = 42;
  std::string mixed_precision = "no";  // no | bf16 | fp16
  int64_t eval_every_steps = 0;  // 0 = after each epoch only
  int64_t log_every_steps = 10;
};

struct FsdpConfig {
  std::string sharding_strategy = "FULL_SHARD";  // FULL_SHARD | SHARD_GRAD_OP | NO_SHARD | HYBRID_SHARD
  std::string state_dict_type = "FULL_STATE_DICT";  // FULL_STATE_DICT | SHARDED_STATE_DICT
  bool offload_to_cpu = true;
  bool rank0_only = true;
  std::string backward_prefetch = "BACKWARD_PRE";  // BACKWARD_PRE | BACKWARD_POST | NO_PREFETCH
  bool forward_prefetch = false;  // gather the next unit while the current one runs forward
};

// [parallel.zero]: DeepSpeed zero_optimization knobs, with DeepSpeed's names
// and meaning (sizes in elements). A DeepSpeed JSON (parallel.deepspeed_config)
// fills these after resolving its "auto" values.
struct ZeroConfig {
  bool overlap_comm = true;               // collectives run while compute goes on
  int64_t reduce_bucket_size = 0;         // gradient elements per reduction; 0 = parallel.bucket_cap_mb
  int64_t allgather_bucket_size = 0;      // parameter elements per post-step all-gather; 0 = one all-gather
  bool contiguous_gradients = true;       // gradients always live in flat buffers here
  bool round_robin_gradients = false;
  int64_t stage3_prefetch_bucket_size = 50000000;      // zero3: elements gathered ahead of use; 0 = off
  int64_t stage3_param_persistence_threshold = 100000;  // zero3: smaller parameters stay replicated
  bool gather_16bit_weights_on_model_save = false;
};

struct ParallelConfig {
  std::string strategy = "ddp";  // ddp | zero1 | zero2 | zero3 | fsdp | hybrid
  std::string deepspeed_config;  // a DeepSpeed JSON file, read as is
  int64_t ranks_per_node = 0;    // 0 = as MPI reports; smaller values emulate nodes (hybrid)
  std::string offload_optimizer = "none";  // none | cpu
  double bucket_cap_mb = 25.0;   // gradient bucket size for overlapped reduction
  FsdpConfig fsdp;
  ZeroConfig zero;
};

struct CheckpointConfig {
  int64_t every_steps = 0;       // 0 = off
  int64_t every_epochs = 1;      // 0 = off
  int64_t num_to_keep = 0;       // 0 = keep all; the newest is always kept
  std::string score_attribute;   // e.g. eval_f1; empty = keep the newest
  std::string score_order = "max";  // max | min
};

struct JobConfig {
  std::string storage_path = "runs";
  std::string name;              // default: the config file's stem
  int64_t max_failures = -1;    // restarts allowed (SLURM_RESTART_COUNT); -1 = no limit
  double collective_timeout_s = 600.0;
  std::string device = "cpu";    // cpu | cuda
};

struct RunConfig {
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  ParallelConfig parallel;
  CheckpointConfig checkpoint;
  JobConfig run;
};

// Metric names that checkpoint.score_attribute may name.
inline const std::vector<std::string>& known_metric_names() {
  static const std::vector<std::string> names = {"eval_accuracy", "eval_f1", "eval_macro_f1", "eval_mcc",
                                                 "eval_loss", "eval_mse", "eval_pearson", "train_loss"};
  return names;
}

// Calls visit(key, field, help, choices) for every key, in file order. `choices`
// is empty when any value of the field's type is allowed. Works for const and
// non-const configs.
template <class Config, class Visitor>
void visit_config_keys(Config& c, Visitor&& visit) {
  using Choices = std::vector<std::string>;
  visit("model.path", c.model.path, "HF model folder (config.json, vocab.txt, model.safetensors)", Choices{});
  visit("model.config", c.model.config, "HF config.json for a randomly initialised model", Choices{});
  visit("model.init", c.model.init, "weights: from model.path, or random", Choices{"pretrained", "random"});
  visit("model.vocab", c.model.vocab, "vocab.txt (default: <model.path>/vocab.txt)", Choices{});
  visit("model.lowercase", c.model.lowercase, "lowercase and strip accents (uncased vocabularies)", Choices{});
  visit("model.num_labels", c.model.num_labels, "number of classes; 0 = from the data, 1 = regression", Choices{});
  visit("model.hidden_dropout_prob", c.model.hidden_dropout_prob, "override the model's hidden dropout", Choices{});
  visit("model.attention_probs_dropout_prob", c.model.attention_probs_dropout_prob,
        "override the model's attention dropout", Choices{});

  visit("data.train_file", c.data.train_file, "training data (.tsv, .csv, .jsonl)", Choices{});
  visit("data.eval_file", c.data.eval_file, "evaluation data; empty = no evaluation", Choices{});
  visit("data.format", c.data.format, "file format", Choices{"auto", "tsv", "csv", "jsonl"});
  visit("data.text_a", c.data.text_a, "first text column (name or 0-based index)", Choices{});
  visit("data.text_b", c.data.text_b, "second text column; empty for single sentences", Choices{});
  visit("data.label", c.data.label, "label column (name or 0-based index)", Choices{});
  visit("data.max_length", c.data.max_length, "truncate pairs to this many tokens (longest first)", Choices{});
  visit("data.on_bad_row", c.data.on_bad_row, "a malformed row stops the run, or is skipped and counted",
        Choices{"error", "skip"});
  visit("data.drop_last", c.data.drop_last, "drop the incomplete last global batch instead of padding it",
        Choices{});
  visit("data.group_by_length", c.data.group_by_length,
        "batch training rows of similar length (less padding; changes which rows share a batch)", Choices{});

  visit("train.num_epochs", c.train.num_epochs, "passes over the training data", Choices{});
  visit("train.max_steps", c.train.max_steps, "stop after this many optimizer steps; 0 = off", Choices{});
  visit("train.lr", c.train.lr, "peak learning rate (AdamW)", Choices{});
  visit("train.weight_decay", c.train.weight_decay, "decoupled weight decay (not on biases and LayerNorm)",
        Choices{});
  visit("train.adam_beta1", c.train.adam_beta1, "AdamW beta1", Choices{});
  visit("train.adam_beta2", c.train.adam_beta2, "AdamW beta2", Choices{});
  visit("train.adam_epsilon", c.train.adam_epsilon, "AdamW epsilon", Choices{});
  visit("train.warmup_steps", c.train.warmup_steps, "linear warmup steps (then linear decay to 0)", Choices{});
  visit("train.warmup_ratio", c.train.warmup_ratio, "warmup as a fraction of all steps (instead of steps)",
        Choices{});
  visit("train.batch_size", c.train.batch_size, "examples per rank per micro-step", Choices{});
  visit("train.eval_batch_size", c.train.eval_batch_size, "examples per rank per eval step", Choices{});
  visit("train.gradient_accumulation_steps", c.train.gradient_accumulation_steps,
        "micro-steps per optimizer step", Choices{});
  visit("train.max_grad_norm", c.train.max_grad_norm, "clip gradients to this global norm; 0 = off", Choices{});
  visit("train.seed", c.train.seed, "seed for init, shuffling and dropout", Choices{});
  visit("train.mixed_precision", c.train.mixed_precision, "compute precision", Choices{"no", "bf16", "fp16"});
  visit("train.eval_every_steps", c.train.eval_every_steps, "also evaluate every N steps; 0 = per epoch only",
        Choices{});
  visit("train.log_every_steps", c.train.log_every_steps, "progress line every N steps", Choices{});

  visit("parallel.strategy", c.parallel.strategy, "how parameters, gradients and optimizer state are spread",
        Choices{"ddp", "zero1", "zero2", "zero3", "fsdp", "hybrid"});
  visit("parallel.deepspeed_config", c.parallel.deepspeed_config, "a DeepSpeed JSON config, read as is",
        Choices{});
  visit("parallel.ranks_per_node", c.parallel.ranks_per_node, "ranks per node; 0 = as MPI reports", Choices{});
  visit("parallel.offload_optimizer", c.parallel.offload_optimizer, "where the optimizer state lives",
        Choices{"none", "cpu"});
  visit("parallel.bucket_cap_mb", c.parallel.bucket_cap_mb, "gradient bucket size in MiB", Choices{});
  visit("parallel.fsdp.sharding_strategy", c.parallel.fsdp.sharding_strategy, "FSDP sharding strategy",
        Choices{"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"});
  visit("parallel.fsdp.state_dict_type", c.parallel.fsdp.state_dict_type, "FSDP state dict for saving",
        Choices{"FULL_STATE_DICT", "SHARDED_STATE_DICT"});
  visit("parallel.fsdp.offload_to_cpu", c.parallel.fsdp.offload_to_cpu, "full state dict gathered in CPU memory",
        Choices{});
  visit("parallel.fsdp.rank0_only", c.parallel.fsdp.rank0_only, "only rank 0 holds the full state dict",
        Choices{});
  visit("parallel.fsdp.backward_prefetch", c.parallel.fsdp.backward_prefetch,
        "gather the next unit's parameters before (PRE) or after (POST) the current unit's backward",
        Choices{"BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"});
  visit("parallel.fsdp.forward_prefetch", c.parallel.fsdp.forward_prefetch,
        "gather the next unit's parameters while the current one runs forward", Choices{});
  visit("parallel.zero.overlap_comm", c.parallel.zero.overlap_comm,
        "zero1/2/3: reduce and gather while compute goes on (DeepSpeed overlap_comm)", Choices{});
  visit("parallel.zero.reduce_bucket_size", c.parallel.zero.reduce_bucket_size,
        "zero1/2/3: gradient elements per reduction; 0 = parallel.bucket_cap_mb", Choices{});
  visit("parallel.zero.allgather_bucket_size", c.parallel.zero.allgather_bucket_size,
        "zero1/2/3: parameter elements per post-step all-gather; 0 = one all-gather", Choices{});
  visit("parallel.zero.contiguous_gradients", c.parallel.zero.contiguous_gradients,
        "zero1/2/3: gradients in one flat buffer (DeepSpeed contiguous_gradients)", Choices{});
  visit("parallel.zero.round_robin_gradients", c.parallel.zero.round_robin_gradients,
        "zero1/2/3: spread gradient copies to the offloaded optimizer across ranks", Choices{});
  visit("parallel.zero.stage3_prefetch_bucket_size", c.parallel.zero.stage3_prefetch_bucket_size,
        "zero3/hybrid: parameter elements gathered ahead of use; 0 = no prefetch", Choices{});
  visit("parallel.zero.stage3_param_persistence_threshold", c.parallel.zero.stage3_param_persistence_threshold,
        "zero3/hybrid: parameters with fewer elements stay replicated", Choices{});
  visit("parallel.zero.gather_16bit_weights_on_model_save", c.parallel.zero.gather_16bit_weights_on_model_save,
        "zero3/hybrid: gather whole 16-bit weights when the model is saved (DeepSpeed meaning)",
        Choices{});

  visit("checkpoint.every_steps", c.checkpoint.every_steps, "checkpoint every N steps; 0 = off", Choices{});
  visit("checkpoint.every_epochs", c.checkpoint.every_epochs, "checkpoint every N epochs; 0 = off", Choices{});
  visit("checkpoint.num_to_keep", c.checkpoint.num_to_keep, "checkpoints kept; 0 = all (newest always kept)",
        Choices{});
  visit("checkpoint.score_attribute", c.checkpoint.score_attribute, "metric that ranks checkpoints", Choices{});
  visit("checkpoint.score_order", c.checkpoint.score_order, "better score is higher or lower",
        Choices{"max", "min"});

  visit("run.storage_path", c.run.storage_path, "directory that holds run folders", Choices{});
  visit("run.name", c.run.name, "run folder name (default: the config file's stem)", Choices{});
  visit("run.max_failures", c.run.max_failures, "restarts allowed (Slurm requeue); -1 = no limit", Choices{});
  visit("run.collective_timeout_s", c.run.collective_timeout_s, "abort if a collective takes longer", Choices{});
  visit("run.device", c.run.device, "compute device", Choices{"cpu", "cuda"});
}

}  // namespace shardtrain
