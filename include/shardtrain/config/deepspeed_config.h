// Reading a DeepSpeed JSON config (parallel.deepspeed_config) into a RunConfig.
//
//   RunConfig config = ...;   // parallel.deepspeed_config = "configs/deepspeed/zero3_offload.json"
//   DeepSpeedContext context;
//   context.world_size = world.size();
//   context.cuda_build = false;
//   for (const auto& line : apply_deepspeed_config(config, context).lines) log_info("%s", line.c_str());
//
// load_run_config() (config/config.h) calls this for you; use it directly only to
// resolve a config for another world size or build.
//
// The JSON is read as DeepSpeed reads it (absent keys take DeepSpeed's
// defaults), and "auto" is resolved the way Hugging Face Accelerate
// (Accelerator._prepare_deepspeed, DeepSpeedPlugin) and transformers
// (HfTrainerDeepSpeedConfig) resolve it, from the run config:
//
//   JSON key                                   -> RunConfig key                 "auto" / absent
//   zero_optimization.stage 0/1/2/3            -> parallel.strategy ddp/zero1/zero2/zero3      absent: 0
//   zero_optimization.offload_optimizer.device -> parallel.offload_optimizer ("none" | "cpu"; pin_memory accepted)
//   zero_optimization.offload_param.device     only "none"
//   zero_optimization.overlap_comm, contiguous_gradients, round_robin_gradients,
//     reduce_bucket_size, allgather_bucket_size, stage3_prefetch_bucket_size,
//     stage3_param_persistence_threshold, gather_16bit_weights_on_model_save
//     (and DeepSpeed's other spellings: prefetch_bucket_size, param_persistence_threshold,
//      stage3_gather_16bit_weights_on_model_save, stage3_gather_fp16_weights_on_model_save)
//                                              -> parallel.zero.<name>         absent: DeepSpeed's default
//       reduce_bucket_size "auto"                  = H * H                   (H = the model's hidden_size)
//       stage3_prefetch_bucket_size "auto"         = int(0.9 * H * H)
//       stage3_param_persistence_threshold "auto"  = 10 * H
//       gather_16bit_weights_on_model_save "auto"  = false
//     Stage-3 keys below stage 3, and every knob at stage 0, are reported as
//     not used (DeepSpeed ignores them there too) and not applied.
//   train_micro_batch_size_per_gpu             -> train.batch_size            auto (or absent with no
//                                                                              train_batch_size): the run's
//   gradient_accumulation_steps                -> train.gradient_accumulation_steps   auto: the run's; absent: 1
//   train_batch_size                           must be micro * accumulation * world_size; auto/absent: that product
//     (with a numeric train_batch_size an absent micro or accumulation is derived from it, as DeepSpeed does)
//   gradient_clipping (number; true = 1.0)     -> train.max_grad_norm         auto: the run's (transformers; Accelerate's
//                                                                              1.0 is train.max_grad_norm's default); absent: 0
//   fp16.enabled / bf16.enabled                -> train.mixed_precision       auto/absent: from train.mixed_precision
//     fp16's loss-scaling keys: only DeepSpeed's defaults (dynamic: loss_scale 0, initial_scale_power 16,
//     loss_scale_window 1000, hysteresis 2, min_loss_scale 1)
//   optimizer AdamW (or Adam, adam_w_mode true): params lr, betas, eps, weight_decay (torch_adam accepted)
//                                              -> train.lr, adam_beta1/2, adam_epsilon, weight_decay
//                                                 auto: the run's; absent: DeepSpeed's optimizer defaults
//                                                 (lr 1e-3, betas [0.9, 0.999], eps 1e-8, weight_decay 0,
//                                                 or 0.01 with torch_adam); no section: the run's AdamW
//   scheduler.type WarmupLR, WarmupDecayLR, WarmupCosineLR
//                                              -> train.lr_scheduler_type (the same name; optim/schedule.h
//                                                 has DeepSpeed's formulas); no section: the run config's
//     params (absent: DeepSpeed's default; "auto" as transformers fills it):
//       warmup_min_lr                          -> train.lr_scheduler_kwargs.warmup_min_lr   absent 0, auto 0
//       warmup_max_lr                          -> train.lr                     absent 0.001, auto train.lr
//       warmup_num_steps                       -> train.warmup_steps           absent 1000, auto the run's
//                                                 warmup (train.warmup_steps or ceil(warmup_ratio x steps))
//       warmup_type "log" | "linear"           -> train.lr_scheduler_kwargs.warmup_type     absent "log"
//       total_num_steps (WarmupDecayLR, WarmupCosineLR; required)
//                                              -> train.lr_scheduler_kwargs.total_num_steps auto 0 (the run's)
//       warmup_min_ratio, cos_min_ratio (WarmupCosineLR)
//                                              -> train.lr_scheduler_kwargs.*  absent 0, 0.0001
//       last_batch_iteration                   only -1 (resume restores the step)
//   steps_per_print                            -> train.log_every_steps
//   wall_clock_breakdown false, prescale_gradients false, gradient_predivide_factor 1.0,
//   zero_allow_untested_optimizer, zero_force_ds_cpu_optimizer, allgather_partitions true,
//   reduce_scatter true                        accepted (what shardtrain does anyway)
//
// H comes from context.hidden_size, else from model.config or
// <model.path>/config.json ("hidden_size", or the largest of "hidden_sizes").
//
// Errors (shardtrain::Error), all found problems in ONE message that lists
// each key with its value and the reason: keys or values shardtrain does not
// implement (offload_param to cpu, stage3_max_live_parameters, sub_group_size,
// an optimizer other than AdamW, the OneCycle and LRRangeTest schedulers,
// a parameter the scheduler type does not have, ...), unknown keys, a train_batch_size that is not
// micro * accumulation * world_size, fp16 on a CPU-only build or with
// run.device = "cpu" (a hint says: bf16 or fp32), and a JSON value that
// contradicts a key the user set in the run config (`keys_set`), as
// transformers refuses a mismatch with TrainingArguments.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "shardtrain/core/run_config.h"

namespace shardtrain {

struct DeepSpeedContext {
  int world_size = 1;           // ranks of the job (DeepSpeed's data-parallel world size)
  bool cuda_build = false;      // false: fp16 is refused (no CUDA in this build)
  int64_t hidden_size = 0;      // 0 = read from the model config when an "auto" needs it
  std::set<std::string> keys_set;  // run-config keys the user set explicitly (file or command line)
};

struct DeepSpeedResolution {
  // One line per JSON key that was read, saying what it became, e.g.
  //   "train_micro_batch_size_per_gpu = \"auto\" -> 16 (train.batch_size)"
  //   "zero_optimization.reduce_bucket_size = \"auto\" -> 16384 (hidden_size 128 squared)"
  std::vector<std::string> lines;
  // RunConfig keys the JSON decided ("parallel.strategy", "parallel.zero.overlap_comm", "train.lr", ...).
  std::set<std::string> keys_set;
};

// Reads config.parallel.deepspeed_config (nothing to do when empty) and writes
// what it says into `config`; parallel.deepspeed_config itself stays set so
// the saved run config records it. Throws shardtrain::Error as described above.
DeepSpeedResolution apply_deepspeed_config(RunConfig& config, const DeepSpeedContext& context);

// The model's hidden size from model.config, else <model.path>/config.json.
// Throws shardtrain::Error naming the file when neither gives one.
int64_t model_hidden_size(const ModelConfig& model);

}  // namespace shardtrain
