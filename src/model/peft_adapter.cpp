// PEFT adapter folders in and out (model/peft_adapter.h; docs/DESIGN.md, "LoRA").
#include "shardtrain/model/peft_adapter.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>

#include <filesystem>
#include <map>
#include <set>

#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/text.h"
#include "shardtrain/model/safetensors.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/tasks/task_rules.h"

namespace shardtrain {
namespace {

constexpr const char* kPeftPrefix = "base_model.model.";

bool peft_file_exists(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0;
}

}  // namespace

LoraSpec read_peft_adapter_config(const std::string& folder, const EncoderConfig& config,
                                  std::string* base_model_name_or_path) {
  const std::string config_path = folder + "/adapter_config.json";
  if (!peft_file_exists(config_path))
    throw Error(folder + ": no adapter_config.json (a PEFT adapter folder holds adapter_config.json and "
                         "adapter_model.safetensors)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(config_path, "the adapter's config"));
  } catch (const nlohmann::json::exception& e) {
    throw Error(config_path + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw Error(config_path + ": not a JSON object");
  auto refuse_if = [&](bool bad, const std::string& what) {
    if (bad) throw Error(config_path + ": " + what);
  };
  // A true boolean field (null and absent: false); another type is an error naming it.
  auto flag = [&](const char* key) {
    if (!j.contains(key) || j[key].is_null()) return false;
    if (!j[key].is_boolean()) throw Error(config_path + ": " + key + " is not true or false");
    return j[key].get<bool>();
  };
  auto text = [&](const char* key, const std::string& fallback) {
    return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : fallback;
  };
  auto set = [&](const char* key) {
    return j.contains(key) && !j[key].is_null() && !(j[key].is_object() && j[key].empty()) &&
           !(j[key].is_array() && j[key].empty());
  };
  const std::string peft_type = text("peft_type", "LORA");
  refuse_if(peft_type != "LORA", "peft_type \"" + peft_type + "\": only LoRA adapters (LORA) are supported");
  refuse_if(flag("use_dora"), "use_dora = true: DoRA adapters are not supported (train a plain LoRA adapter)");
  refuse_if(text("bias", "none") != "none",
            "bias = \"" + text("bias", "") + "\": only bias = \"none\" is supported (the adapter trains no biases)");
  refuse_if(flag("lora_bias"), "lora_bias = true: adapters with a bias on lora_B are not supported");
  refuse_if(flag("fan_in_fan_out"), "fan_in_fan_out = true: that is for GPT-2's Conv1D layers, not an encoder's Linear");
  refuse_if(set("layers_to_transform"), "layers_to_transform is set: adapters on some layers only are not supported");
  refuse_if(set("exclude_modules"), "exclude_modules is set: excluding modules from target_modules is not supported");
  for (const char* pattern : {"rank_pattern", "alpha_pattern"})
    refuse_if(set(pattern), std::string(pattern) + " is set: per-module ranks and alphas are not supported");
  // PiSSA, OLoRA, CorDA, LoftQ and EVA initialise against a changed base: their
  // adapters do not apply to the original weights.
  if (j.contains("init_lora_weights") && j["init_lora_weights"].is_string()) {
    const std::string init = j["init_lora_weights"].get<std::string>();
    refuse_if(init != "gaussian", "init_lora_weights = \"" + init +
                                      "\": only PEFT's default (true) and \"gaussian\" initialisations are supported "
                                      "(the others change the base weights the adapter applies to)");
  }
  if (j.contains("target_modules") && j["target_modules"].is_string()) {
    // PEFT stores a regular expression or "all-linear" as a string.
    const std::string t = j["target_modules"].get<std::string>();
    refuse_if(t != "all-linear", "target_modules is the regular expression \"" + t +
                                     "\": only a list of module names (or \"all-linear\") is supported");
    j["target_modules"] = std::vector<std::string>{t};
  }
  if (base_model_name_or_path)
    *base_model_name_or_path = j.contains("base_model_name_or_path") && j["base_model_name_or_path"].is_string()
                                   ? j["base_model_name_or_path"].get<std::string>()
                                   : "";
  return LoraSpec::from_json(j, config, config_path);
}


PeftAdapter read_peft_adapter(const std::string& folder, const EncoderConfig& config) {
  PeftAdapter out;
  out.spec = read_peft_adapter_config(folder, config, &out.base_model_name_or_path);
  const std::string weights_path = folder + "/adapter_model.safetensors";
  if (!peft_file_exists(weights_path))
    throw Error(folder + ": no adapter_model.safetensors" +
                (peft_file_exists(folder + "/adapter_model.bin")
                     ? std::string(" (adapter_model.bin is a pickle, which shardtrain does not read: save the adapter "
                                   "with safe_serialization=True)")
                     : std::string()));
  const SafetensorsFile file(weights_path);
  // Expected: each target's A and B, each saved module's parameters.
  std::map<std::string, std::vector<int64_t>> expected;
  for (const ParameterSpec& p : lora_trainable_plan(config, out.spec)) expected.emplace(p.name, p.shape);
  std::set<std::string> seen;
  for (const SafetensorsEntry& entry : file.entries()) {
    std::string name = entry.name;
    if (name.rfind(kPeftPrefix, 0) != 0)
      throw Error(weights_path + ": tensor \"" + entry.name + "\" does not start with \"" + kPeftPrefix +
                  "\": not a PEFT adapter of a transformers model");
    name = name.substr(std::string(kPeftPrefix).size());
    for (const std::string wrapped : {".modules_to_save.default.", ".modules_to_save."}) {
      const size_t at = name.find(wrapped);
      if (at != std::string::npos) name = name.substr(0, at) + "." + name.substr(at + wrapped.size());
    }
    for (const std::string adapter_name : {".lora_A.default.weight", ".lora_B.default.weight"}) {
      const size_t at = name.find(adapter_name);
      if (at != std::string::npos) name = name.substr(0, at) + adapter_name.substr(0, 7) + ".weight";
    }
    if (name.find(".lora_magnitude_vector") != std::string::npos)
      throw Error(weights_path + ": tensor \"" + entry.name + "\" is DoRA's magnitude: DoRA adapters are not supported");
    if (name.find(".lora_embedding_") != std::string::npos)
      throw Error(weights_path + ": tensor \"" + entry.name + "\" adapts an Embedding: only Linear modules are supported");
    const auto found = expected.find(name);
    if (found == expected.end())
      throw Error(weights_path + ": tensor \"" + entry.name + "\" has no place in this " + config.model_type + " " +
                  config.architecture() + " with adapter_config.json's target_modules and modules_to_save");
    at::Tensor t = file.tensor(entry.name);
    if (t.sizes().vec() != found->second)
      throw Error(weights_path + ": tensor \"" + entry.name + "\" is " + shape_text(t.sizes().vec()) + ", but this " +
                  config.model_type + " model needs " + shape_text(found->second) +
                  " (r = " + std::to_string(out.spec.r) + "; the base's shapes and num_labels must be the adapter's)");
    if (!t.is_floating_point()) throw Error(weights_path + ": tensor \"" + entry.name + "\" is not floating-point");
    t = t.to(at::kFloat);
    if (!at::isfinite(t).all().item<bool>())
      throw Error(weights_path + ": tensor \"" + entry.name + "\" holds NaN or infinity");
    seen.insert(name);
    out.tensors.emplace_back(name, t);
  }
  for (const LinearModule& m : out.spec.targets)
    for (const char* part : {".lora_A.weight", ".lora_B.weight"})
      if (!seen.count(m.name + part))
        throw Error(weights_path + ": no tensor \"" + kPeftPrefix + m.name + part +
                    "\": target_modules names module " + m.name + ", which the adapter's weights lack");
  for (const auto& [name, shape] : expected)
    if (!seen.count(name) && name.find(".lora_") == std::string::npos)
      log_warn("%s: no tensor for %s (a module to save); it keeps the base's value or its fresh init",
               weights_path.c_str(), name.c_str());
  return out;
}

PeftAdapterHead peek_peft_adapter(const std::string& folder) {
  PeftAdapterHead out;
  const std::string config_path = folder + "/adapter_config.json";
  if (peft_file_exists(config_path)) {
    const nlohmann::json j = nlohmann::json::parse(read_file(config_path, "the adapter's config"), nullptr, false);
    if (j.is_object() && j.contains("task_type") && j["task_type"].is_string())
      for (Task task : all_tasks()) {
        const char* type = task_rules(task).peft_task_type();
        if (type && j["task_type"].get<std::string>() == type) out.task = task;
      }
  }
  const std::string path = folder + "/adapter_model.safetensors";
  if (!peft_file_exists(path)) return out;
  const SafetensorsFile file(path);
  for (const char* head : {"classifier.out_proj.weight", "classifier.weight", "score.weight"})
    for (const SafetensorsEntry& entry : file.entries()) {
      std::string name = entry.name;
      for (const std::string wrapped : {".modules_to_save.default.", ".modules_to_save."}) {
        const size_t at = name.find(wrapped);
        if (at != std::string::npos) name = name.substr(0, at) + "." + name.substr(at + wrapped.size());
      }
      const std::string tail = std::string(".") + head;
      if (name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0 &&
          name.find("pre_classifier") == std::string::npos && entry.shape.size() == 2) {
        out.num_labels = entry.shape[0];
        return out;
      }
    }
  return out;
}

void apply_peft_adapter(TaskModel& model, const PeftAdapter& adapter, const std::string& folder) {
  at::NoGradGuard no_grad;
  for (const auto& [name, tensor] : adapter.tensors) {
    at::Tensor target = model.parameter(name);
    if (target.sizes() != tensor.sizes())
      throw Error(folder + ": tensor " + name + " does not fit the model");
    target.copy_(tensor);
  }
}

std::string peft_adapter_config_json(const LoraSpec& lora, Task task, const std::string& base_model_name_or_path) {
  using json = nlohmann::json;
  const char* task_type = task_rules(task).peft_task_type();
  json j = json::object();
  j["alpha_pattern"] = json::object();
  j["auto_mapping"] = nullptr;
  j["base_model_name_or_path"] = base_model_name_or_path;
  j["bias"] = "none";
  j["eva_config"] = nullptr;
  j["exclude_modules"] = nullptr;
  j["fan_in_fan_out"] = false;
  j["inference_mode"] = true;
  j["init_lora_weights"] = lora.init == LoraInit::kGaussian ? json("gaussian") : json(true);
  j["layer_replication"] = nullptr;
  j["layers_pattern"] = nullptr;
  j["layers_to_transform"] = nullptr;
  j["loftq_config"] = json::object();
  j["lora_alpha"] = lora.alpha;
  j["lora_bias"] = false;
  j["lora_dropout"] = lora.dropout;
  j["megatron_config"] = nullptr;
  j["megatron_core"] = "megatron.core";
  j["modules_to_save"] = lora.modules_to_save;
  j["peft_type"] = "LORA";
  j["r"] = lora.r;
  j["rank_pattern"] = json::object();
  j["revision"] = nullptr;
  j["target_modules"] = lora.target_modules;
  j["task_type"] = task_type ? json(task_type) : json(nullptr);
  j["use_dora"] = false;
  j["use_rslora"] = lora.use_rslora;
  return j.dump(2) + "\n";
}

void write_peft_adapter(const std::string& folder, const TaskModel& model, const std::string& base_model_name_or_path,
                        at::ScalarType dtype) {
  const LoraSpec* lora = model.lora();
  if (!lora) throw Error("write_peft_adapter: the model has no LoRA adapter");
  std::error_code error;
  std::filesystem::create_directories(folder, error);
  if (error) throw Error("cannot create " + folder + ": " + error.message());
  NamedTensors tensors;
  for (const auto& [name, tensor] : model.state_dict())
    tensors.emplace_back(kPeftPrefix + name, tensor.detach().to(at::kCPU, dtype).contiguous());
  write_safetensors(folder + "/adapter_model.safetensors", tensors);
  write_file_atomic(folder + "/adapter_config.json",
                    peft_adapter_config_json(*lora, model.config().task, base_model_name_or_path));
}

}  // namespace shardtrain
