// Reading a DeepSpeed JSON (config/deepspeed_config.h): the file, the walk over
// its top level and the one message with every problem. Each section has its
// Resolver method in the file named after it (src/config/deepspeed_resolver.h
// lists them); the top-level keys that are one value each (gradient_clipping,
// steps_per_print, ...) are read here. docs/DESIGN.md, "Config is data;
// choices are enums".
#include "shardtrain/config/deepspeed_config.h"

#include <nlohmann/json.hpp>

#include <string>

#include "config/deepspeed_resolver.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/json_read.h"

namespace shardtrain {
namespace deepspeed {

// The sections are read after the walk, in a fixed order: the scheduler's
// warmup_max_lr is checked against the optimizer's lr.
void Resolver::run(const json& root) {
  const json *micro = nullptr, *accumulation = nullptr, *total = nullptr, *clipping = nullptr;
  const json *fp16 = nullptr, *bf16 = nullptr, *zero = nullptr, *optimizer = nullptr, *scheduler = nullptr;
  const json* activation_checkpointing = nullptr;
  std::string bf16_name = "bf16";
  for (const auto& item : root.items()) {
    const std::string& key = item.key();
    const json& v = item.value();
    if (key == "train_micro_batch_size_per_gpu") micro = &v;
    else if (key == "gradient_accumulation_steps") accumulation = &v;
    else if (key == "train_batch_size") total = &v;
    else if (key == "gradient_clipping") clipping = &v;
    else if (key == "fp16") fp16 = &v;
    else if (key == "bf16" || key == "bfloat16") {  // "bfloat16" is DeepSpeed's older name
      if (bf16) problem(key, &v, "both \"bf16\" and \"bfloat16\" are given; keep one");
      bf16 = &v;
      bf16_name = key;
    } else if (key == "zero_optimization") zero = &v;
    else if (key == "optimizer") optimizer = &v;
    else if (key == "scheduler") scheduler = &v;
    else if (key == "activation_checkpointing") activation_checkpointing = &v;
    else if (key == "steps_per_print") {
      if (auto n = integer(key, v, 1, false)) {
        if (assign("train.log_every_steps", c_.train.log_every_steps, *n, key, &v))
          line(key, &v, "train.log_every_steps = " + text(*n));
      }
    } else if (key == "wall_clock_breakdown") {
      if (auto b = boolean(key, v)) {
        if (*b) problem(key, &v, "DeepSpeed's per-step timing breakdown is not implemented; set it to false");
        else line(key, &v, "accepted (no timing breakdown)");
      }
    } else if (key == "zero_allow_untested_optimizer" || key == "zero_force_ds_cpu_optimizer") {
      if (boolean(key, v)) line(key, &v, "accepted, no effect: the optimizer is always shardtrain's AdamW");
    } else if (key == "prescale_gradients") {
      if (auto b = boolean(key, v)) {
        if (*b) problem(key, &v, "dividing gradients before the reduction is not implemented; set it to false");
        else line(key, &v, "accepted (gradients are averaged after the reduction)");
      }
    } else if (key == "gradient_predivide_factor") {
      if (v.is_number() && v.get<double>() == 1.0) line(key, &v, "accepted (no pre-division)");
      else problem(key, &v, "only 1.0 (no pre-division) is implemented");
    } else {
      problem(key, &v, "not a DeepSpeed key shardtrain implements (it reads train_batch_size, "
                       "train_micro_batch_size_per_gpu, gradient_accumulation_steps, gradient_clipping, fp16, bf16, "
                       "zero_optimization, optimizer, scheduler, activation_checkpointing, steps_per_print, "
                       "wall_clock_breakdown)");
    }
  }
  resolve_precision(fp16, bf16, bf16_name);
  resolve_zero(zero);
  resolve_batch(micro, accumulation, total);
  resolve_clipping(clipping);
  resolve_optimizer(optimizer);
  resolve_scheduler(scheduler);
  resolve_activation_checkpointing(activation_checkpointing);
}

// gradient_clipping -> train.max_grad_norm.
void Resolver::resolve_clipping(const json* v) {
  const char* key = "gradient_clipping";
  double value = 0;
  std::string note;
  if (!v) {
    note = " (DeepSpeed's default: no clipping)";
  } else if (is_auto(*v)) {
    value = c_.train.max_grad_norm;
    note = " (the run config's)";
  } else if (v->is_boolean()) {
    value = v->get<bool>() ? 1.0 : 0.0;  // DeepSpeed reads the number: true is 1.0
  } else if (auto n = number(key, *v, 0, true)) {
    value = *n;
  } else {
    return;
  }
  if (assign("train.max_grad_norm", c_.train.max_grad_norm, value, key, v))
    line(key, v, "train.max_grad_norm = " + text(value) + note);
}

}  // namespace deepspeed

DeepSpeedResolution apply_deepspeed_config(RunConfig& config, const DeepSpeedContext& context) {
  using deepspeed::json;
  const std::string& path = config.parallel.deepspeed_config;
  if (path.empty()) return {};
  ST_ASSERT(context.world_size >= 1, "world size must be >= 1");
  // A folder, FIFO or symlink loop is refused before opening; depth and
  // duplicate keys are checked while parsing (core/json_read.h).
  const json root = read_user_json_file(path, "parallel.deepspeed_config");
  if (!root.is_object()) throw Error("parallel.deepspeed_config = '" + path + "': expected a JSON object { ... }");

  deepspeed::Resolver resolver(config, context);
  resolver.run(root);
  if (!resolver.problems.empty()) {
    std::string message = "parallel.deepspeed_config = '" + path + "': " + std::to_string(resolver.problems.size()) +
                          (resolver.problems.size() == 1 ? " key needs" : " keys need") + " changing:";
    for (const auto& p : resolver.problems) message += "\n  - " + p;
    throw Error(message);
  }
  for (auto& l : resolver.out.lines) l = "deepspeed: " + l;
  return resolver.out;
}

}  // namespace shardtrain
