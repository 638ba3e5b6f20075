// LoRA adapters in PEFT's format (docs/DESIGN.md, "LoRA"): which Linear
// modules of a model get a low-rank update, which are trained in full, and
// the parameters that adds. Torch-free: the config checks, the memory
// estimate and the checkpoint layout read it without LibTorch.
//
//   LoraSpec lora = resolve_lora(model_config, run_config.lora, "lora");
//   for (const ParameterSpec& p : lora_trainable_plan(model_config, lora)) ...  // what is trained
//
// A target module `m` (an HF Linear, weight [out, in]) computes
//   y = x W^T + b + scaling * dropout(x) A^T B^T,   A [r, in], B [out, r],
// scaling = alpha / r (alpha / sqrt(r) with use_rslora), as PEFT's
// lora.Linear does; its parameters are named "<m>.lora_A.weight" and
// "<m>.lora_B.weight" (PEFT's names without "base_model.model." and the
// adapter name). Every other parameter is frozen, except those of the
// modules_to_save (the task's head, and any the user names), which are
// trained in full.
//
// Matching, as PEFT does it: a target name matches a module whose whole name
// is that name or ends in "." + that name ("query", "self.query"); "all-linear" is every Linear's last
// name part except the sequence-classification head's. A modules_to_save
// name matches every module whose name ends in it (PEFT compares strings: so
// "classifier" matches DistilBERT's pre_classifier too, as in PEFT). Unlike
// PEFT, a module inside a module trained in full gets no adapter.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "shardtrain/core/run_config.h"
#include "shardtrain/model/encoder_config.h"
#include "shardtrain/model/parameter_plan.h"

namespace shardtrain {

// One Linear module of a model: its HF name ("bert.encoder.layer.0.attention.self.query").
struct LinearModule {
  std::string name;
  int64_t unit = 0;
  Slot weight_slot = Slot::kCount;
  int64_t in_features = 0, out_features = 0;
  bool has_bias = true;
};

// Every Linear module of the model for `config`, in the plan's order.
std::vector<LinearModule> linear_modules(const EncoderConfig& config);

// A resolved adapter configuration.
struct LoraSpec {
  int64_t r = 8;
  double alpha = 8.0;
  double dropout = 0.0;
  bool use_rslora = false;
  LoraInit init = LoraInit::kDefault;
  // As PEFT writes them to adapter_config.json: the target names (all-linear
  // resolved to last names, sorted) and modules_to_save (the task's head
  // modules, then the user's).
  std::vector<std::string> target_modules;
  std::vector<std::string> modules_to_save;
  std::vector<LinearModule> targets;  // the modules that get an adapter, in plan order

  double scaling() const;
  // Whether parameter `name` of the base plan is trained in full (in a module to save).
  bool saves(const std::string& name) const;
  // For a checkpoint's attribute and back (the model config gives the targets again).
  nlohmann::json to_json() const;
  static LoraSpec from_json(const nlohmann::json& json, const EncoderConfig& config, const std::string& source);
};

// The adapter that `options` (the [lora] section: r, alpha, dropout, use_rslora,
// init, target_modules, modules_to_save; not adapter) describes for a model
// of `config`. Error naming the key: r < 1, alpha <= 0, dropout outside
// [0, 1), a target name that matches no Linear module, a model type without
// PEFT default targets and none named (DistilBERT, ModernBERT), a module to
// save that matches nothing.
LoraSpec resolve_lora(const EncoderConfig& config, const LoraConfig& options, const std::string& source = "lora");

// A PEFT adapter folder's adapter_config.json for a model of `config`,
// checked as read_peft_adapter (model/peft_adapter.h) checks it, without its
// weights: Error naming the file and the field for another peft_type, DoRA,
// a bias, fan_in_fan_out, per-layer patterns or a regular-expression
// target_modules. Its base_model_name_or_path too when asked.
LoraSpec read_peft_adapter_config(const std::string& folder, const EncoderConfig& config,
                                  std::string* base_model_name_or_path = nullptr);

// The trainable parameters of the model with `lora`: the modules to save's
// parameters, and after each target module's own parameters its lora_A
// ([r, in]: lora_part kA) and lora_B ([out, r]: kB), in the plan's order (the
// flat layout's order). The rest of parameter_plan(config) is frozen.
std::vector<ParameterSpec> lora_trainable_plan(const EncoderConfig& config, const LoraSpec& lora);
// The names of the frozen base parameters (trainable in the plan, not saved).
std::vector<std::string> lora_frozen_names(const EncoderConfig& config, const LoraSpec& lora);

}  // namespace shardtrain
