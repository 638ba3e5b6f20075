// Which modules get LoRA adapters, matched as PEFT matches them
// (docs/DESIGN.md, "LoRA").
#include "shardtrain/model/lora.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <set>

#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/text.h"
#include "shardtrain/model/family_spec.h"
#include "shardtrain/tasks/task_rules.h"

namespace shardtrain {
namespace {

bool lora_is_linear_weight(Slot slot) {
  switch (slot) {
    case Slot::kEmbeddingProjectWeight:
    case Slot::kQueryWeight:
    case Slot::kKeyWeight:
    case Slot::kValueWeight:
    case Slot::kQkvWeight:
    case Slot::kAttentionOutWeight:
    case Slot::kMlpInWeight:
    case Slot::kMlpGateWeight:
    case Slot::kMlpOutWeight:
    case Slot::kPositionKeyWeight:
    case Slot::kPositionQueryWeight:
    case Slot::kHeadDenseWeight:
    case Slot::kClassifierWeight: return true;
    default: return false;
  }
}

bool lora_ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string lora_last_part(const std::string& name) {
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

// PEFT's check_target_module_exists for a list: the whole name, or a tail of it after a dot.
bool lora_target_matches(const std::string& module, const std::string& target) {
  return module == target || lora_ends_with(module, "." + target);
}

// PEFT's modules_to_save test (any(key.endswith(name))) over a parameter's
// enclosing modules: "classifier.dense.weight" is in "classifier.dense" and "classifier".
bool lora_in_saved_module(const std::string& parameter, const std::vector<std::string>& saved) {
  std::string module = parameter;
  for (size_t dot = module.rfind('.'); dot != std::string::npos; dot = module.rfind('.')) {
    module.resize(dot);
    for (const std::string& name : saved)
      if (lora_ends_with(module, name)) return true;
  }
  return false;
}

}  // namespace

std::vector<LinearModule> linear_modules(const EncoderConfig& config) {
  const std::vector<ParameterSpec> plan = parameter_plan(config);
  std::vector<LinearModule> out;
  for (size_t i = 0; i < plan.size(); ++i) {
    const ParameterSpec& p = plan[i];
    if (!p.trainable || p.shape.size() != 2 || !lora_is_linear_weight(p.slot) || !lora_ends_with(p.name, ".weight")) continue;
    LinearModule m;
    m.name = p.name.substr(0, p.name.size() - 7);
    m.unit = p.unit;
    m.weight_slot = p.slot;
    m.out_features = p.shape[0];
    m.in_features = p.shape[1];
    m.has_bias = i + 1 < plan.size() && plan[i + 1].name == m.name + ".bias";
    out.push_back(m);
  }
  return out;
}

double LoraSpec::scaling() const {
  return use_rslora ? alpha / std::sqrt(static_cast<double>(r)) : alpha / static_cast<double>(r);
}

bool LoraSpec::saves(const std::string& name) const { return lora_in_saved_module(name, modules_to_save); }

LoraSpec resolve_lora(const EncoderConfig& config, const LoraConfig& options, const std::string& source) {
  if (options.r < 1)
    throw Error(str_format("%s.r = %lld: the LoRA rank must be at least 1", source.c_str(),
                           static_cast<long long>(options.r)));
  if (!(options.alpha > 0) || !std::isfinite(options.alpha))
    throw Error(str_format("%s.alpha = %g: must be a positive number", source.c_str(), options.alpha));
  if (!(options.dropout >= 0 && options.dropout < 1))
    throw Error(str_format("%s.dropout = %g: must be in [0, 1)", source.c_str(), options.dropout));
  LoraSpec spec;
  spec.r = options.r;
  spec.alpha = options.alpha;
  spec.dropout = options.dropout;
  spec.use_rslora = options.use_rslora;
  spec.init = options.init;

  const TaskRules& rules = task_rules(config.task);
  spec.modules_to_save = rules.peft_head_modules();
  for (const std::string& name : options.modules_to_save)
    if (std::find(spec.modules_to_save.begin(), spec.modules_to_save.end(), name) == spec.modules_to_save.end())
      spec.modules_to_save.push_back(name);
  const std::vector<ParameterSpec> plan = parameter_plan(config);
  for (const std::string& name : options.modules_to_save) {
    const bool found = std::any_of(plan.begin(), plan.end(), [&](const ParameterSpec& p) {
      return p.trainable && lora_in_saved_module(p.name, {name});
    });
    if (!found)
      throw Error(str_format("%s.modules_to_save: \"%s\" matches no module of this %s model (a module's name must "
                             "end in it, e.g. \"pooler\")",
                             source.c_str(), name.c_str(), config.model_type.c_str()));
  }

  const std::vector<LinearModule> linears = linear_modules(config);
  std::vector<std::string> targets = options.target_modules;
  const bool all_linear = targets.size() == 1 && targets[0] == "all-linear";
  if (targets.empty()) {
    const ModelType& type = family_spec(config.family).model_type(config.model_type);
    targets = type.lora_target_modules;
    if (targets.empty())
      throw Error(str_format("%s.target_modules: PEFT has no default target modules for model_type \"%s\"; name the "
                             "Linear modules to adapt (e.g. [\"%s\"]) or [\"all-linear\"]",
                             source.c_str(), config.model_type.c_str(),
                             linears.empty() ? "" : lora_last_part(linears.front().name).c_str()));
  } else if (all_linear) {
    // PEFT's _maybe_include_all_linear_layers: every Linear's last name part,
    // less the sequence-classification head's.
    std::set<std::string> names;
    for (const LinearModule& m : linears) names.insert(lora_last_part(m.name));
    if (config.task == Task::kSequenceClassification) {
      for (const char* head : {"score", "classifier"})
        if (std::any_of(linears.begin(), linears.end(), [&](const LinearModule& m) { return m.name == head; })) {
          names.erase(head);
          break;
        }
    }
    targets.assign(names.begin(), names.end());
  } else {
    for (const std::string& t : targets) {
      if (t == "all-linear")
        throw Error(source + ".target_modules: \"all-linear\" stands alone; give it as the only entry");
      if (!std::any_of(linears.begin(), linears.end(), [&](const LinearModule& m) { return lora_target_matches(m.name, t); })) {
        std::set<std::string> names;
        for (const LinearModule& m : linears) names.insert(lora_last_part(m.name));
        throw Error(str_format("%s.target_modules: \"%s\" matches no Linear module of this %s model; its Linear "
                               "modules end in: %s",
                               source.c_str(), t.c_str(), config.model_type.c_str(),
                               join_names(std::vector<std::string>(names.begin(), names.end())).c_str()));
      }
    }
  }
  std::sort(targets.begin(), targets.end());
  targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
  spec.target_modules = targets;
  for (const LinearModule& m : linears) {
    if (lora_in_saved_module(m.name + ".weight", spec.modules_to_save)) continue;  // trained in full
    if (std::any_of(targets.begin(), targets.end(), [&](const std::string& t) { return lora_target_matches(m.name, t); }))
      spec.targets.push_back(m);
  }
  if (spec.targets.empty())
    throw Error(str_format("%s.target_modules: [%s] leaves no module to adapt outside modules_to_save [%s]",
                           source.c_str(), join_names(targets).c_str(), join_names(spec.modules_to_save).c_str()));
  return spec;
}

std::vector<ParameterSpec> lora_trainable_plan(const EncoderConfig& config, const LoraSpec& lora) {
  const std::vector<ParameterSpec> plan = parameter_plan(config);
  std::vector<ParameterSpec> out;
  size_t next_target = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    const ParameterSpec& p = plan[i];
    if (p.trainable && lora.saves(p.name)) out.push_back(p);
    if (next_target >= lora.targets.size()) continue;
    const LinearModule& m = lora.targets[next_target];
    // The adapter after the module's last parameter (its bias, or its weight).
    const std::string last = m.name + (m.has_bias ? ".bias" : ".weight");
    if (p.name != last) continue;
    ++next_target;
    ParameterSpec a;
    a.name = m.name + ".lora_A.weight";
    a.shape = {lora.r, m.in_features};
    a.unit = m.unit;
    a.slot = m.weight_slot;
    a.lora = LoraPart::kA;
    a.init = lora.init == LoraInit::kGaussian ? InitKind::kNormal : InitKind::kKaimingUniform;
    a.init_std = 1.0 / static_cast<double>(lora.r);
    ParameterSpec b = a;
    b.name = m.name + ".lora_B.weight";
    b.shape = {m.out_features, lora.r};
    b.lora = LoraPart::kB;
    b.init = InitKind::kZeros;
    out.push_back(a);
    out.push_back(b);
  }
  if (next_target != lora.targets.size())
    throw Error("lora: the target modules are not in this model's parameter order (" +
                lora.targets[next_target].name + ")");
  return out;
}

std::vector<std::string> lora_frozen_names(const EncoderConfig& config, const LoraSpec& lora) {
  std::vector<std::string> out;
  for (const ParameterSpec& p : parameter_plan(config))
    if (p.trainable && !lora.saves(p.name)) out.push_back(p.name);
  return out;
}

nlohmann::json LoraSpec::to_json() const {
  nlohmann::json j;
  j["r"] = r;
  j["lora_alpha"] = alpha;
  j["lora_dropout"] = dropout;
  j["use_rslora"] = use_rslora;
  j["init_lora_weights"] = init == LoraInit::kGaussian ? nlohmann::json("gaussian") : nlohmann::json(true);
  j["target_modules"] = target_modules;
  j["modules_to_save"] = modules_to_save;
  return j;
}

LoraSpec LoraSpec::from_json(const nlohmann::json& j, const EncoderConfig& config, const std::string& source) {
  LoraConfig options;
  try {
    options.r = j.at("r").get<int64_t>();
    options.alpha = j.at("lora_alpha").get<double>();
    options.dropout = j.value("lora_dropout", 0.0);
    options.use_rslora = j.value("use_rslora", false);
    const nlohmann::json init = j.value("init_lora_weights", nlohmann::json(true));
    options.init = init.is_string() && init.get<std::string>() == "gaussian" ? LoraInit::kGaussian : LoraInit::kDefault;
    options.target_modules = j.at("target_modules").get<std::vector<std::string>>();
    const std::vector<std::string> head = task_rules(config.task).peft_head_modules();
    if (j.contains("modules_to_save") && !j["modules_to_save"].is_null())
      for (const std::string& name : j["modules_to_save"].get<std::vector<std::string>>())
        if (std::find(head.begin(), head.end(), name) == head.end()) options.modules_to_save.push_back(name);
  } catch (const nlohmann::json::exception& e) {
    throw Error(source + ": not a LoRA configuration (" + e.what() + ")");
  }
  return resolve_lora(config, options, source);
}

}  // namespace shardtrain
