// RunConfig: everything a run needs to know, as plain structs.
//
// One TOML file with the sections below configures a run; every key can also be
// set on the command line as `--section.key value` (command line wins). The
// file is parsed and validated once, by config/config.h; the rest of the program
// only reads these structs. Keys with a fixed set of values are enums
// (core/enum_names.h), parsed once from their names. visit_config_keys() below is
// the single list of keys: it drives parsing, `--help`, validation messages and
// the resolved config printed at start and saved with every run.
//
// Relative paths are relative to the directory the job is started from.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shardtrain/core/enum_names.h"

namespace shardtrain {

struct ModelConfig {
  Task task = Task::kSequenceClassification;
  std::string path;              // HF model folder: config.json, vocab.txt, model.safetensors
  std::string config;            // HF config.json for a randomly initialised model
  ModelInit init = ModelInit::kPretrained;
  std::string vocab;             // tokenizer: vocab.txt, tokenizer.json or a folder; default <path>/vocab.txt or <path>
  bool lowercase = false;        // uncased vocabulary (tokenizer_config.json in model.path wins)
  int64_t num_labels = 0;        // 0 = from the training data's labels
  std::optional<double> hidden_dropout_prob;           // unset = the model config's value
  std::optional<double> attention_probs_dropout_prob;  // unset = the model config's value
  // Activation checkpointing (HF's name): each encoder layer keeps only its
  // input and runs its forward again in backward (model/activation_checkpoint.h).
  bool gradient_checkpointing = false;
  // Unpadded (packed) batches: the model computes on the real tokens only
  // (model/task_model.h); false = on the padded [B, L] batch, as HF does.
  bool unpadded = true;
};

struct DataConfig {
  std::string train_file;
  std::string eval_file;
  FileFormat format = FileFormat::kAuto;  // kAuto: from the file extension
  // Columns (name or 0-based index). Sequence classification: the texts and
  // the label. Token classification: the words (a list per row) and their
  // tags; defaults "tokens" / "ner_tags" (HF datasets' names) unless set;
  // CoNLL files take columns by index only. Multiple choice: text_a the
  // context, text_b an optional text put before every choice, data.choices,
  // label the right choice (a preset's columns, else text_a required and
  // label "label", as HF's run_swag; src/tasks/multiple_choice/rules.cpp).
  std::string text_a = "#1 String";
  std::string text_b = "#2 String";  // empty = single-sentence task
  std::string label = "Quality";
  // Token classification: the tag names in id order; empty = the sorted tags
  // of the training data (or the model's id2label when it has names).
  std::vector<std::string> labels;
  // Token classification: every sub-word token of a word carries its tag (B-
  // turned into I- after the first), not only the first (HF label_all_tokens).
  bool label_all_tokens = false;
  // Multiple choice: the choice columns (ending0, ending1, ...), or one column
  // that holds a list of choices per row.
  std::vector<std::string> choices;
  // Multiple choice: the columns of SWAG (sent1, sent2, ending0..3, label) or
  // COPA / XCOPA (premise, question, choice1, choice2, label).
  DataPreset preset = DataPreset::kNone;
  // Extractive QA (run_qa.py's arguments; data/qa_data.h reads SQuAD JSON or
  // HF's flattened JSONL): the overlap of a long context's windows in tokens,
  // SQuAD v2 (questions without an answer), and post-processing's settings.
  int64_t doc_stride = 128;
  bool version_2_with_negative = false;
  int64_t n_best_size = 20;
  int64_t max_answer_length = 30;
  double null_score_diff_threshold = 0.0;
  int64_t max_length = 128;  // extractive QA: 384 unless set
  BadRowPolicy on_bad_row = BadRowPolicy::kError;
  bool drop_last = false;        // train: drop the incomplete last global batch instead of padding it
  bool group_by_length = false;  // train: batch rows of similar length (changes batch composition; data/sampler.h)
};

// train.lr_scheduler_kwargs.*: the parameters of train.lr_scheduler_type, under
// the names of the library the type comes from (transformers' lr_scheduler_kwargs,
// DeepSpeed's scheduler.params). optim/schedule.h has the formulas.
struct LrSchedulerKwargs {
  std::optional<double> num_cycles;  // cosine, cosine_with_min_lr, warmup_stable_decay (unset = 0.5),
                                     // cosine_with_restarts (unset = 1)
  int64_t timescale = 0;             // inverse_sqrt; 0 = the warmup steps, or 10000 without warmup
  std::optional<double> min_lr;       // cosine_with_min_lr: the floor (one of min_lr, min_lr_rate)
  std::optional<double> min_lr_rate;  // cosine_with_min_lr: the floor as a fraction of train.lr
  int64_t num_decay_steps = 0;       // warmup_stable_decay (required, > 0)
  int64_t num_stable_steps = -1;     // warmup_stable_decay; -1 = the run's steps - warmup - decay
  WsdDecayType decay_type = WsdDecayType::kCosine;  // warmup_stable_decay
  double min_lr_ratio = 0.0;         // warmup_stable_decay: the floor as a fraction of train.lr
  double lr_end = 1e-7;              // polynomial
  double power = 1.0;                // polynomial
  double warmup_min_lr = 0.0;        // WarmupLR, WarmupDecayLR
  WarmupType warmup_type = WarmupType::kLog;  // WarmupLR, WarmupDecayLR, WarmupCosineLR (DeepSpeed's default)
  int64_t total_num_steps = 0;       // WarmupDecayLR, WarmupCosineLR; 0 = the run's optimizer steps
  double warmup_min_ratio = 0.0;     // WarmupCosineLR
  double cos_min_ratio = 0.0001;     // WarmupCosineLR
};

// fp16 loss scaling (train.fp16.*), with DeepSpeed's names. The defaults are
// torch.cuda.amp.GradScaler's (what Accelerate uses for mixed_precision =
// "fp16"); a DeepSpeed JSON's fp16 section sets DeepSpeed's.
struct Fp16Config {
  double loss_scale = 0;             // 0 = dynamic; > 0 = this static scale
  int64_t initial_scale_power = 16;  // dynamic: start at 2^power
  int64_t loss_scale_window = 2000;  // dynamic: good steps before the scale doubles
  int64_t hysteresis = 1;            // dynamic: overflows absorbed before the scale halves
  bool consecutive_hysteresis = false;  // dynamic: refill the hysteresis on every good step
  double min_loss_scale = 0;         // dynamic: the scale never goes below this
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
  LrSchedulerType lr_scheduler_type = LrSchedulerType::kLinear;
  LrSchedulerKwargs lr_scheduler_kwargs;
  int64_t batch_size = 16;       // per rank, per micro-step
  int64_t eval_batch_size = 32;  // per rank
  int64_t gradient_accumulation_steps = 1;
  double max_grad_norm = 1.0;    // 0 = no clipping
  int64_t seed = 42;
  Precision mixed_precision = Precision::kNo;
  Fp16Config fp16;
  int64_t eval_every_steps = 0;  // 0 = after each epoch only
  int64_t log_every_steps = 10;
  // Early stopping on checkpoint.score_attribute (train/early_stopping.h); 0 = off.
  int64_t early_stopping_patience = 0;
  double early_stopping_threshold = 0.0;
};

struct FsdpConfig {
  FsdpShardingStrategy sharding_strategy = FsdpShardingStrategy::kFullShard;
  FsdpStateDictType state_dict_type = FsdpStateDictType::kFullStateDict;
  bool offload_to_cpu = true;
  bool rank0_only = true;
  BackwardPrefetch backward_prefetch = BackwardPrefetch::kBackwardPre;
  bool forward_prefetch = false;  // gather the next unit while the current one runs forward
  // FSDP MixedPrecision: parameters (forward / backward, gathers), gradient
  // reductions, buffers; kAuto = train.mixed_precision's dtype (Accelerate).
  DtypeSetting param_dtype = DtypeSetting::kAuto;
  DtypeSetting reduce_dtype = DtypeSetting::kAuto;
  DtypeSetting buffer_dtype = DtypeSetting::kAuto;
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
  StrategyKind strategy = StrategyKind::kDdp;
  std::string deepspeed_config;  // a DeepSpeed JSON file, read as is
  int64_t ranks_per_node = 0;    // 0 = as MPI reports; smaller values emulate nodes (hybrid)
  OffloadDevice offload_optimizer = OffloadDevice::kNone;
  double bucket_cap_mb = 25.0;   // gradient bucket size for overlapped reduction
  FsdpConfig fsdp;
  ZeroConfig zero;
};

struct CheckpointConfig {
  int64_t every_steps = 0;       // 0 = off
  int64_t every_epochs = 1;      // 0 = off
  int64_t num_to_keep = 0;       // 0 = keep all; the newest is always kept
  std::string score_attribute;   // e.g. eval_f1; empty = keep the newest
  ScoreOrder score_order = ScoreOrder::kMax;
  double preemption_grace_s = 25.0;  // SIGTERM: an emergency checkpoint, exit within this; 0 = off
};

struct JobConfig {
  std::string storage_path = "runs";
  std::string name;              // default: the config file's stem
  int64_t max_failures = -1;    // restarts allowed (SLURM_RESTART_COUNT); -1 = no limit
  double collective_timeout_s = 600.0;
  Device device = Device::kCpu;
  bool memory_check = true;  // refuse a job whose memory estimate does not fit; false: warn and start it
};

// LoRA adapters (docs/DESIGN.md, "LoRA"): the base model frozen, low-rank
// updates of its Linear layers and the task's head trained, in PEFT's format.
struct LoraConfig {
  int64_t r = 0;          // the rank; 0 = off (full fine-tuning) unless lora.adapter is set
  double alpha = 8.0;     // PEFT's lora_alpha: the update is scaled by alpha / r
  double dropout = 0.0;   // on the adapter's input
  bool use_rslora = false;  // scale alpha / sqrt(r) (rank-stabilised LoRA)
  LoraInit init = LoraInit::kDefault;
  std::vector<std::string> target_modules;   // PEFT's matching; empty = the model type's default; ["all-linear"]
  std::vector<std::string> modules_to_save;  // trained in full beyond the task's head (PEFT's rule)
  std::string adapter;    // a PEFT adapter folder to start from (its adapter_config.json gives r, alpha, targets)
  bool enabled() const { return r > 0 || !adapter.empty(); }
};

struct RunConfig {
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  ParallelConfig parallel;
  CheckpointConfig checkpoint;
  JobConfig run;
  LoraConfig lora;
};

// Metric names that checkpoint.score_attribute may name.
inline const std::vector<std::string>& known_metric_names() {
  static const std::vector<std::string> names = {"eval_accuracy", "eval_f1", "eval_macro_f1", "eval_mcc", "eval_precision", "eval_recall",
                                                 "eval_loss", "eval_mse", "eval_pearson", "train_loss",
                                                 // extractive QA (metrics/squad_metrics.h)
                                                 "eval_exact_match", "eval_exact", "eval_HasAns_exact", "eval_HasAns_f1",
                                                 "eval_NoAns_exact", "eval_NoAns_f1", "eval_best_exact", "eval_best_f1"};
  return names;
}

// Calls visit(key, field, help) for every key, in file order. A field's type
// says what it takes: std::string, int64_t, double, std::optional<double>,
// bool, std::vector<std::string> (a TOML array of strings; on the command
// line the same array, '["O", "B-PER"]', or comma-separated, O,B-PER), or one
// of the enums of core/enum_names.h (whose names are the allowed values).
// Works for const and non-const configs.
template <class Config, class Visitor>
void visit_config_keys(Config& c, Visitor&& visit) {
  visit("model.task", c.model.task,
        "what the model is fine-tuned for (transformers' AutoModelFor<Task>: a sequence's label, each token's tag, "
        "or the right choice among several)");
  visit("model.path", c.model.path, "HF model folder (config.json, vocab.txt, model.safetensors)");
  visit("model.config", c.model.config, "HF config.json for a randomly initialised model");
  visit("model.init", c.model.init, "weights: from model.path, or random");
  visit("model.vocab", c.model.vocab,
        "tokenizer: a vocab.txt, a tokenizer.json, or a folder with tokenizer.json, vocab.json + merges.txt or "
        "vocab.txt (default: <model.path>/vocab.txt, else <model.path>)");
  visit("model.lowercase", c.model.lowercase, "lowercase and strip accents (uncased vocabularies)");
  visit("model.num_labels", c.model.num_labels, "number of classes; 0 = from the data, 1 = regression");
  visit("model.hidden_dropout_prob", c.model.hidden_dropout_prob, "override the model's hidden dropout");
  visit("model.attention_probs_dropout_prob", c.model.attention_probs_dropout_prob,
        "override the model's attention dropout");
  visit("model.gradient_checkpointing", c.model.gradient_checkpointing,
        "recompute each encoder layer's forward in backward (less activation memory, about a third more compute)");
  visit("model.unpadded", c.model.unpadded,
        "compute on the real tokens only (packed batches); false = on the padded batch as HF does");

  visit("data.train_file", c.data.train_file, "training data (.tsv, .csv, .jsonl)");
  visit("data.eval_file", c.data.eval_file, "evaluation data; empty = no evaluation");
  visit("data.format", c.data.format, "file format (conll: a token and its tag per line, a blank line between sentences)");
  visit("data.text_a", c.data.text_a,
        "first text column (name or 0-based index); token classification: the words (default \"tokens\"); "
        "multiple choice: the context (required without data.preset)");
  visit("data.text_b", c.data.text_b,
        "second text column; empty for single sentences; multiple choice: a text put before every choice");
  visit("data.label", c.data.label,
        "label column (name or 0-based index); token classification: the tags (default \"ner_tags\"); multiple "
        "choice: the right choice's index (default \"label\")");
  visit("data.labels", c.data.labels,
        "token classification: the tag names in id order; empty = the sorted tags of the training data");
  visit("data.label_all_tokens", c.data.label_all_tokens,
        "token classification: every sub-word carries its word's tag (B- becomes I-), not only the first");
  visit("data.choices", c.data.choices,
        "multiple choice: the choice columns, or one column holding a list of choices");
  visit("data.preset", c.data.preset,
        "multiple choice: the columns of SWAG (sent1, sent2, ending0-3, label) or COPA / XCOPA (premise, "
        "question, choice1, choice2, label)");
  visit("data.doc_stride", c.data.doc_stride,
        "question answering: tokens shared by consecutive windows of a long context (run_qa's doc_stride)");
  visit("data.version_2_with_negative", c.data.version_2_with_negative,
        "question answering: some questions have no answer (SQuAD v2); predict \"\" when the null score wins");
  visit("data.n_best_size", c.data.n_best_size, "question answering: start and end candidates per window");
  visit("data.max_answer_length", c.data.max_answer_length, "question answering: the longest answer, in tokens");
  visit("data.null_score_diff_threshold", c.data.null_score_diff_threshold,
        "question answering (v2): predict no answer when the null score beats the best span's by more than this");
  visit("data.max_length", c.data.max_length,
        "truncate pairs to this many tokens (longest first); question answering: window length (default 384)");
  visit("data.on_bad_row", c.data.on_bad_row, "a malformed row stops the run, or is skipped and counted");
  visit("data.drop_last", c.data.drop_last, "drop the incomplete last global batch instead of padding it");
  visit("data.group_by_length", c.data.group_by_length,
        "batch training rows of similar length (less padding; changes which rows share a batch)");

  visit("train.num_epochs", c.train.num_epochs, "passes over the training data");
  visit("train.max_steps", c.train.max_steps, "stop after this many optimizer steps; 0 = off");
  visit("train.lr", c.train.lr, "peak learning rate (AdamW)");
  visit("train.weight_decay", c.train.weight_decay, "decoupled weight decay (not on biases and LayerNorm)");
  visit("train.adam_beta1", c.train.adam_beta1, "AdamW beta1");
  visit("train.adam_beta2", c.train.adam_beta2, "AdamW beta2");
  visit("train.adam_epsilon", c.train.adam_epsilon, "AdamW epsilon");
  visit("train.warmup_steps", c.train.warmup_steps, "learning-rate warmup steps");
  visit("train.warmup_ratio", c.train.warmup_ratio, "warmup as a fraction of all steps (instead of steps)");
  visit("train.lr_scheduler_type", c.train.lr_scheduler_type,
        "learning-rate schedule (transformers' lr_scheduler_type, or a DeepSpeed scheduler type)");
  visit("train.batch_size", c.train.batch_size, "examples per rank per micro-step");
  visit("train.eval_batch_size", c.train.eval_batch_size, "examples per rank per eval step");
  visit("train.gradient_accumulation_steps", c.train.gradient_accumulation_steps,
        "micro-steps per optimizer step");
  visit("train.max_grad_norm", c.train.max_grad_norm, "clip gradients to this global norm; 0 = off");
  visit("train.seed", c.train.seed, "seed for init, shuffling and dropout");
  visit("train.mixed_precision", c.train.mixed_precision, "compute precision");
  visit("train.eval_every_steps", c.train.eval_every_steps, "also evaluate every N steps; 0 = per epoch only");
  visit("train.log_every_steps", c.train.log_every_steps, "progress line every N steps");
  visit("train.early_stopping_patience", c.train.early_stopping_patience,
        "stop after N evaluations in a row without checkpoint.score_attribute improving; 0 = off");
  visit("train.early_stopping_threshold", c.train.early_stopping_threshold,
        "early stopping: an improvement must exceed this much");
  // Sub-tables come after their section's plain keys (TOML cannot reopen [train]).
  visit("train.lr_scheduler_kwargs.num_cycles", c.train.lr_scheduler_kwargs.num_cycles,
        "cosine: waves (unset = 0.5, a half cosine); cosine_with_restarts: hard restarts (unset = 1)");
  visit("train.lr_scheduler_kwargs.timescale", c.train.lr_scheduler_kwargs.timescale,
        "inverse_sqrt: lr = train.lr / sqrt((step + timescale - warmup) / timescale); 0 = the warmup (or 10000)");
  visit("train.lr_scheduler_kwargs.min_lr", c.train.lr_scheduler_kwargs.min_lr,
        "cosine_with_min_lr: the learning rate the cosine ends at (or min_lr_rate)");
  visit("train.lr_scheduler_kwargs.min_lr_rate", c.train.lr_scheduler_kwargs.min_lr_rate,
        "cosine_with_min_lr: the end of the cosine as a fraction of train.lr (or min_lr)");
  visit("train.lr_scheduler_kwargs.num_decay_steps", c.train.lr_scheduler_kwargs.num_decay_steps,
        "warmup_stable_decay: steps of the decay (required)");
  visit("train.lr_scheduler_kwargs.num_stable_steps", c.train.lr_scheduler_kwargs.num_stable_steps,
        "warmup_stable_decay: steps at train.lr after the warmup; -1 = the run's steps - warmup - decay");
  visit("train.lr_scheduler_kwargs.decay_type", c.train.lr_scheduler_kwargs.decay_type,
        "warmup_stable_decay: the decay's curve");
  visit("train.lr_scheduler_kwargs.min_lr_ratio", c.train.lr_scheduler_kwargs.min_lr_ratio,
        "warmup_stable_decay: the floor of warmup and decay as a fraction of train.lr");
  visit("train.lr_scheduler_kwargs.lr_end", c.train.lr_scheduler_kwargs.lr_end,
        "polynomial: the learning rate at the last step");
  visit("train.lr_scheduler_kwargs.power", c.train.lr_scheduler_kwargs.power, "polynomial: the decay's power");
  visit("train.lr_scheduler_kwargs.warmup_min_lr", c.train.lr_scheduler_kwargs.warmup_min_lr,
        "WarmupLR, WarmupDecayLR: the learning rate the warmup starts from (it rises to train.lr)");
  visit("train.lr_scheduler_kwargs.warmup_type", c.train.lr_scheduler_kwargs.warmup_type,
        "DeepSpeed schedulers: the warmup's curve");
  visit("train.lr_scheduler_kwargs.total_num_steps", c.train.lr_scheduler_kwargs.total_num_steps,
        "WarmupDecayLR, WarmupCosineLR: the step the decay ends at; 0 = the run's last step");
  visit("train.lr_scheduler_kwargs.warmup_min_ratio", c.train.lr_scheduler_kwargs.warmup_min_ratio,
        "WarmupCosineLR: the warmup starts at this fraction of train.lr");
  visit("train.lr_scheduler_kwargs.cos_min_ratio", c.train.lr_scheduler_kwargs.cos_min_ratio,
        "WarmupCosineLR: the cosine ends at this fraction of train.lr");

  visit("train.fp16.loss_scale", c.train.fp16.loss_scale, "fp16: 0 = dynamic loss scaling, > 0 = this static scale");
  visit("train.fp16.initial_scale_power", c.train.fp16.initial_scale_power,
        "fp16, dynamic: the first loss scale is 2^power");
  visit("train.fp16.loss_scale_window", c.train.fp16.loss_scale_window,
        "fp16, dynamic: good steps before the scale doubles");
  visit("train.fp16.hysteresis", c.train.fp16.hysteresis, "fp16, dynamic: overflows absorbed before the scale halves");
  visit("train.fp16.consecutive_hysteresis", c.train.fp16.consecutive_hysteresis,
        "fp16, dynamic: refill the hysteresis on every good step");
  visit("train.fp16.min_loss_scale", c.train.fp16.min_loss_scale, "fp16, dynamic: the lowest loss scale");
  visit("parallel.strategy", c.parallel.strategy, "how parameters, gradients and optimizer state are spread");
  visit("parallel.deepspeed_config", c.parallel.deepspeed_config, "a DeepSpeed JSON config, read as is");
  visit("parallel.ranks_per_node", c.parallel.ranks_per_node, "ranks per node; 0 = as MPI reports");
  visit("parallel.offload_optimizer", c.parallel.offload_optimizer, "where the optimizer state lives");
  visit("parallel.bucket_cap_mb", c.parallel.bucket_cap_mb, "gradient bucket size in MiB");
  visit("parallel.fsdp.sharding_strategy", c.parallel.fsdp.sharding_strategy, "FSDP sharding strategy");
  visit("parallel.fsdp.state_dict_type", c.parallel.fsdp.state_dict_type, "FSDP state dict for saving");
  visit("parallel.fsdp.offload_to_cpu", c.parallel.fsdp.offload_to_cpu, "full state dict gathered in CPU memory");
  visit("parallel.fsdp.rank0_only", c.parallel.fsdp.rank0_only, "only rank 0 holds the full state dict");
  visit("parallel.fsdp.backward_prefetch", c.parallel.fsdp.backward_prefetch,
        "gather the next unit's parameters before (PRE) or after (POST) the current unit's backward");
  visit("parallel.fsdp.forward_prefetch", c.parallel.fsdp.forward_prefetch,
        "gather the next unit's parameters while the current one runs forward");
  visit("parallel.fsdp.param_dtype", c.parallel.fsdp.param_dtype,
        "FSDP MixedPrecision: parameters in forward / backward and gathers; auto = train.mixed_precision");
  visit("parallel.fsdp.reduce_dtype", c.parallel.fsdp.reduce_dtype,
        "FSDP MixedPrecision: gradient reductions; auto = train.mixed_precision");
  visit("parallel.fsdp.buffer_dtype", c.parallel.fsdp.buffer_dtype,
        "FSDP MixedPrecision: buffers (BERT has none); auto = train.mixed_precision");
  visit("parallel.zero.overlap_comm", c.parallel.zero.overlap_comm,
        "zero1/2/3: reduce and gather while compute goes on (DeepSpeed overlap_comm)");
  visit("parallel.zero.reduce_bucket_size", c.parallel.zero.reduce_bucket_size,
        "zero1/2/3: gradient elements per reduction; 0 = parallel.bucket_cap_mb");
  visit("parallel.zero.allgather_bucket_size", c.parallel.zero.allgather_bucket_size,
        "zero1/2/3: parameter elements per post-step all-gather; 0 = one all-gather");
  visit("parallel.zero.contiguous_gradients", c.parallel.zero.contiguous_gradients,
        "zero1/2/3: gradients in one flat buffer (DeepSpeed contiguous_gradients)");
  visit("parallel.zero.round_robin_gradients", c.parallel.zero.round_robin_gradients,
        "zero1/2/3: spread gradient copies to the offloaded optimizer across ranks");
  visit("parallel.zero.stage3_prefetch_bucket_size", c.parallel.zero.stage3_prefetch_bucket_size,
        "zero3/hybrid: parameter elements gathered ahead of use; 0 = no prefetch");
  visit("parallel.zero.stage3_param_persistence_threshold", c.parallel.zero.stage3_param_persistence_threshold,
        "zero3/hybrid: parameters with fewer elements stay replicated");
  visit("parallel.zero.gather_16bit_weights_on_model_save", c.parallel.zero.gather_16bit_weights_on_model_save,
        "zero3/hybrid: gather whole 16-bit weights when the model is saved (DeepSpeed meaning)");

  visit("checkpoint.every_steps", c.checkpoint.every_steps, "checkpoint every N steps; 0 = off");
  visit("checkpoint.every_epochs", c.checkpoint.every_epochs, "checkpoint every N epochs; 0 = off");
  visit("checkpoint.num_to_keep", c.checkpoint.num_to_keep, "checkpoints kept; 0 = all (newest always kept)");
  visit("checkpoint.score_attribute", c.checkpoint.score_attribute, "metric that ranks checkpoints");
  visit("checkpoint.score_order", c.checkpoint.score_order, "better score is higher or lower");
  visit("checkpoint.preemption_grace_s", c.checkpoint.preemption_grace_s,
        "on SIGTERM: one emergency checkpoint at the next step boundary if it fits, then exit 143, all within "
        "this many seconds; 0 = SIGTERM ends the job at once");

  visit("lora.r", c.lora.r, "LoRA rank; 0 = full fine-tuning (the base model trained too)");
  visit("lora.alpha", c.lora.alpha, "LoRA scaling numerator (PEFT lora_alpha): updates scaled by alpha / r");
  visit("lora.dropout", c.lora.dropout, "dropout on the LoRA branch's input (PEFT lora_dropout)");
  visit("lora.use_rslora", c.lora.use_rslora, "scale by alpha / sqrt(r) instead of alpha / r (rank-stabilised LoRA)");
  visit("lora.init", c.lora.init, "A's init (PEFT init_lora_weights): Kaiming-uniform, or N(0, 1/r); B starts at zero");
  visit("lora.target_modules", c.lora.target_modules,
        "Linear modules that get adapters, as PEFT matches them (a whole name or a tail of it after a dot), or "
        "all-linear; empty = PEFT's default for the model type");
  visit("lora.modules_to_save", c.lora.modules_to_save,
        "modules trained in full besides the task's head (classifier / score / qa_outputs), e.g. pooler");
  visit("lora.adapter", c.lora.adapter, "a PEFT adapter folder to start from (adapter_config.json and its weights)");

  visit("run.storage_path", c.run.storage_path, "directory that holds run folders");
  visit("run.name", c.run.name, "run folder name (default: the config file's stem)");
  visit("run.max_failures", c.run.max_failures, "restarts allowed (Slurm requeue); -1 = no limit");
  visit("run.collective_timeout_s", c.run.collective_timeout_s, "abort if a collective takes longer");
  visit("run.device", c.run.device, "compute device");
  visit("run.memory_check", c.run.memory_check,
        "refuse a job whose memory estimate exceeds the memory available to it; false: warn and start it");
}

}  // namespace shardtrain
