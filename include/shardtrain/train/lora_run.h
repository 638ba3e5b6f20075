// A LoRA run's model (docs/DESIGN.md, "LoRA"): the adapter added to the
// loaded base, from the [lora] section or from a PEFT adapter folder, and the
// base's identity, which checkpoints record and resume, predict and export check.
//
//   attach_lora(*model, config.lora, seed);                 // fresh, or lora.adapter's weights
//   std::string sha = frozen_base_sha256(*model);           // before any cast or move
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardtrain/core/run_config.h"

namespace shardtrain {

class TaskModel;

// Adds the run's adapter to `model` (on the CPU, fp32): lora.adapter's
// (adapter_config.json's settings, its weights copied in; a [lora] key set
// that contradicts the folder is an Error naming both), or a fresh one from the
// [lora] keys initialised from `seed`. Logs what is trained.
void attach_lora(TaskModel& model, const LoraConfig& lora, uint64_t seed);

// Error when a parameter that the base folder lacks (HfLoadReport's
// missing_keys: HF initialises it at random) is frozen by the adapter: it
// would stay random, and an exported adapter would not carry it (DeBERTa's
// pooler). Names the key and the module to add to lora.modules_to_save;
// `what` follows "the LoRA adapter" in the message ("", " in DIR").
void refuse_frozen_missing_keys(const TaskModel& model, const std::vector<std::string>& missing_keys,
                                const std::string& folder, const std::string& what);

// SHA-256 over the frozen parameters in the plan's order, each as its name,
// a NUL, and its values in float32 little-endian: the base a LoRA adapter
// was trained on, whatever file format held it.
std::string frozen_base_sha256(const TaskModel& model);

// Error unless `actual` is `recorded` (a LoRA checkpoint's base_model_sha256):
// names the checkpoint, the base folder and both hashes.
void check_base_identity(const std::string& recorded, const std::string& actual, const std::string& checkpoint,
                         const std::string& base_path);

}  // namespace shardtrain
