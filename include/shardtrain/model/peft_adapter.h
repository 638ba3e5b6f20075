// PEFT adapter folders (docs/DESIGN.md, "LoRA"): adapter_config.json and
// adapter_model.safetensors as PEFT's save_pretrained writes them, so that
// PeftModel.from_pretrained(base, folder) loads what shardtrain trained, and
// shardtrain loads what PEFT trained.
//
//   write_peft_adapter("out/adapter", model, "bert-base-cased", at::kFloat);
//   PeftAdapter a = read_peft_adapter("out/adapter", model.config());
//   model.add_lora(a.spec, seed);
//   apply_peft_adapter(model, a, "out/adapter");
//
// Keys: "base_model.model.<module>.lora_A.weight" [r, in], ".lora_B.weight"
// [out, r], and each parameter of the modules to save under
// "base_model.model.<name>" (PEFT drops "modules_to_save.default." on save;
// a key that still has it is read too).
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "shardtrain/model/lora.h"

namespace shardtrain {

class TaskModel;

struct PeftAdapter {
  LoraSpec spec;
  std::vector<std::pair<std::string, at::Tensor>> tensors;  // under the model's names, fp32
  std::string base_model_name_or_path;
};

// Reads `folder` for a model of `config`. Error naming the folder and the
// field or tensor: no adapter_config.json or weights (adapter_model.safetensors;
// adapter_model.bin is not read: convert it), a peft_type other than LORA,
// use_dora, bias other than "none", fan_in_fan_out, layers_to_transform,
// rank_pattern / alpha_pattern, a target module the model lacks, a module with
// adapter weights missing or of the wrong shape, a tensor the model has no
// place for.
PeftAdapter read_peft_adapter(const std::string& folder, const EncoderConfig& config);

// What an adapter folder says of the model it needs, before a model exists:
// the task (adapter_config.json's task_type: SEQ_CLS, TOKEN_CLS,
// QUESTION_ANS) and the head's labels (the rows of its saved classifier /
// score weight, RoBERTa's classifier.out_proj; from the safetensors header).
struct PeftAdapterHead {
  std::optional<Task> task;
  std::optional<int64_t> num_labels;
};
PeftAdapterHead peek_peft_adapter(const std::string& folder);

// Copies the adapter's tensors into `model`, which has add_lora(adapter.spec) done.
void apply_peft_adapter(TaskModel& model, const PeftAdapter& adapter, const std::string& folder);

// adapter_config.json's text for `lora` (every field PEFT 0.13+ writes).
std::string peft_adapter_config_json(const LoraSpec& lora, Task task, const std::string& base_model_name_or_path);

// Writes `folder`/adapter_config.json and adapter_model.safetensors (the
// model's adapters and modules to save, in `dtype`). Creates the folder.
void write_peft_adapter(const std::string& folder, const TaskModel& model, const std::string& base_model_name_or_path,
                        at::ScalarType dtype = at::kFloat);

}  // namespace shardtrain
