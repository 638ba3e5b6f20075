// A LoRA run's model: the adapter and the base's identity (train/lora_run.h).
#include "shardtrain/train/lora_run.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <vector>

#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/text.h"
#include "shardtrain/core/sha256.h"
#include "shardtrain/model/peft_adapter.h"
#include "shardtrain/model/task_model.h"

namespace shardtrain {

void refuse_frozen_missing_keys(const TaskModel& model, const std::vector<std::string>& missing_keys,
                                const std::string& folder, const std::string& what) {
  for (const auto& [name, tensor] : model.frozen_state_dict()) {
    if (std::find(missing_keys.begin(), missing_keys.end(), name) == missing_keys.end()) continue;
    const std::string module = name.substr(0, name.rfind('.'));
    throw Error(folder + " has no " + name + " (it would start from a random init), and the LoRA adapter" + what +
                " freezes it: it would stay random, and no adapter file carries it. Add \"" + module +
                "\" to lora.modules_to_save (PEFT's modules_to_save), or use a base folder that has it");
  }
}

void attach_lora(TaskModel& model, const LoraConfig& lora, uint64_t seed) {
  const EncoderConfig& config = model.config();
  LoraSpec spec;
  if (!lora.adapter.empty()) {
    PeftAdapter adapter = read_peft_adapter(lora.adapter, config);
    const LoraConfig defaults;
    auto differs = [&](bool set_and_different, const char* key, const std::string& ours, const std::string& theirs) {
      if (set_and_different)
        throw Error(std::string("lora.") + key + " = " + ours + " but lora.adapter " + lora.adapter +
                    " has " + theirs + " in adapter_config.json; leave lora." + key + " out (the adapter's is used)");
    };
    differs(lora.r != defaults.r && lora.r != adapter.spec.r, "r", std::to_string(lora.r), std::to_string(adapter.spec.r));
    differs(lora.alpha != defaults.alpha && lora.alpha != adapter.spec.alpha, "alpha", str_format("%g", lora.alpha),
            str_format("%g", adapter.spec.alpha));
    auto joined = [](const std::vector<std::string>& names) { return "[" + join_names(names) + "]"; };
    if (!lora.target_modules.empty()) {  // compared as resolved ("all-linear", any order)
      LoraConfig ours = lora;
      ours.r = adapter.spec.r;
      ours.adapter.clear();
      const std::vector<std::string> resolved = resolve_lora(config, ours).target_modules;
      differs(resolved != adapter.spec.target_modules, "target_modules", joined(resolved),
              joined(adapter.spec.target_modules));
    }
    differs(lora.use_rslora != adapter.spec.use_rslora && lora.use_rslora != defaults.use_rslora, "use_rslora",
            "true", "use_rslora false");
    differs(!lora.modules_to_save.empty(), "modules_to_save", joined(lora.modules_to_save),
            "modules_to_save " + joined(adapter.spec.modules_to_save));
    spec = adapter.spec;
    spec.dropout = lora.dropout != defaults.dropout ? lora.dropout : adapter.spec.dropout;
    model.add_lora(spec, seed);
    apply_peft_adapter(model, adapter, lora.adapter);
    log_info("LoRA: starting from the adapter in %s", lora.adapter.c_str());
  } else {
    spec = resolve_lora(config, lora);
    model.add_lora(spec, seed);
  }
  int64_t trained = 0, frozen = 0;
  for (const auto& [name, t] : model.state_dict()) trained += t.numel();
  for (const auto& [name, t] : model.frozen_state_dict()) frozen += t.numel();
  const std::string targets = join_names(spec.target_modules), saved = join_names(spec.modules_to_save);
  log_info("LoRA: r %lld, alpha %g (scaling %g), dropout %g; %zu modules adapted (target_modules %s), modules_to_save "
           "%s; %lld of %lld parameters trained (%.3f%%)",
           static_cast<long long>(spec.r), spec.alpha, spec.scaling(), spec.dropout, spec.targets.size(),
           targets.c_str(), saved.c_str(), static_cast<long long>(trained), static_cast<long long>(trained + frozen),
           100.0 * static_cast<double>(trained) / static_cast<double>(trained + frozen));
}

std::string frozen_base_sha256(const TaskModel& model) {
  Sha256 h;
  for (const auto& [name, tensor] : model.frozen_state_dict()) {
    h.update(name.c_str(), name.size() + 1);
    const at::Tensor values = tensor.detach().to(at::kCPU, at::kFloat).contiguous();
    h.update(values.data_ptr(), static_cast<size_t>(values.numel()) * sizeof(float));
  }
  return h.hex_digest();
}

void check_base_identity(const std::string& recorded, const std::string& actual, const std::string& checkpoint,
                         const std::string& base_path) {
  if (recorded == actual) return;
  throw Error(checkpoint + " is a LoRA adapter of another base model: its frozen base weights had sha256 " + recorded +
              ", the base loaded from " + (base_path.empty() ? std::string("the random init") : base_path) +
              " has " + actual + "; use the base it was trained on (model.path, or --base)");
}

}  // namespace shardtrain
