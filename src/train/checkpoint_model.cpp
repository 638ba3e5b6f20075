#include "shardtrain/train/checkpoint_model.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <fstream>

#include "shardtrain/core/check.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/model/parameter_plan.h"
#include "shardtrain/model/safetensors.h"
#include "shardtrain/optim/param_layout.h"
#include "shardtrain/model/hf_folder.h"
#include "shardtrain/train/lora_run.h"

#include <filesystem>
#include <nlohmann/json.hpp>

namespace shardtrain {

CheckpointModel load_checkpoint_model(const std::string& path, MPI_Comm comm, const std::string& base_folder) {
  CheckpointReader reader(path, comm);
  CheckpointModel out;
  out.state = read_train_state(reader);
  out.config = EncoderConfig::from_json(out.state.model_config_json, path + " (attribute model_config_json)");
  if (out.state.lora_json.empty()) {
    if (!base_folder.empty())
      throw Error("--base " + base_folder + ": " + path + " is not a LoRA checkpoint (it holds the whole model)");
    out.model = std::make_shared<TaskModel>(out.config);
  } else {
    // The base, then the adapter: as the run built it (train/job.h).
    nlohmann::json lora_json;
    try {
      lora_json = nlohmann::json::parse(out.state.lora_json);
    } catch (const nlohmann::json::exception& e) {
      throw Error(path + ": attribute lora_json is not JSON (" + std::string(e.what()) + "); the checkpoint is damaged");
    }
    const LoraSpec lora = LoraSpec::from_json(lora_json, out.config, path + " (attribute lora_json)");
    const std::string folder = base_folder.empty() ? out.state.base_model_path : base_folder;
    if (folder.empty()) {
      out.model = std::make_shared<TaskModel>(out.config);
      out.model->init_weights(static_cast<uint64_t>(out.state.seed));
    } else {
      if (!std::filesystem::is_directory(folder))
        throw Error(path + " is a LoRA adapter of the base model in " + folder +
                    ", which is not a folder here; pass the base's folder with --base");
      HfLoadOptions load;
      load.task = out.config.task;
      load.num_labels = out.config.num_labels;
      load.init_seed = static_cast<uint64_t>(out.state.seed);
      const std::shared_ptr<TaskModel> base = load_hf_folder(folder, load).model;
      // The checkpoint's config (its label names) over the base's weights.
      out.model = std::make_shared<TaskModel>(out.config);
      at::NoGradGuard no_grad;
      for (const auto& [name, tensor] : out.model->state_dict()) {
        at::Tensor source;
        try {
          source = base->parameter(name);
        } catch (const Error&) {
        }
        if (!source.defined() || source.sizes() != tensor.sizes())
          throw Error(path + ": the base in " + folder + " (a " + base->config().model_type + ") does not have the "
                      "checkpoint's " + name + "; pass the base it was trained on with --base");
        tensor.copy_(source);
      }
    }
    out.model->add_lora(lora, static_cast<uint64_t>(out.state.seed));
    check_base_identity(out.state.base_model_sha256, frozen_base_sha256(*out.model), path, folder);
  }
  const std::vector<std::pair<std::string, at::Tensor>> parameters = out.model->state_dict();
  const ParamLayout layout(parameters);
  FlatPart part;
  part.params = at::empty({layout.numel()}, at::TensorOptions().dtype(at::kFloat));
  read_train_part(reader, flat_tensors(layout), part);
  {
    at::NoGradGuard no_grad;
    const std::vector<at::Tensor> views = layout.views(part.params);
    for (size_t i = 0; i < parameters.size(); ++i) parameters[i].second.copy_(views[i]);
  }
  out.model->eval();
  out.vocab_text = out.state.vocab_text;
  out.lowercase = out.state.lowercase != 0;
  return out;
}

Tokenizer checkpoint_tokenizer(const TrainState& state, const std::string& path) {
  if (!state.tokenizer_files.empty())
    return Tokenizer::from_saved_files(state.tokenizer_files, path + " (attribute tokenizer_files)");
  TokenizerOptions options;
  options.lowercase = state.lowercase != 0;
  return Tokenizer::from_vocab_text(state.vocab_text, options, path + " (attribute vocab_text)");
}

std::vector<FlatTensor> model_flat_tensors(const EncoderConfig& config, const std::string& source,
                                           const LoraSpec* lora) {
  config.validate(source);
  // The model allocates exactly parameter_plan()'s trainable tensors, in its
  // order, so the layout cannot drift from state_dict() (with LoRA,
  // lora_trainable_plan's, which add_lora follows).
  std::vector<FlatTensor> out;
  int64_t offset = 0;
  for (const ParameterSpec& p : lora ? lora_trainable_plan(config, *lora) : parameter_plan(config)) {
    if (!p.trainable) continue;
    out.push_back(FlatTensor{p.name, p.shape, offset});
    offset += p.numel();
  }
  return out;
}

std::vector<FlatTensor> checkpoint_flat_tensors(const TrainState& state, const std::string& path) {
  const std::string source = path + " (attribute model_config_json)";
  const EncoderConfig config = EncoderConfig::from_json(state.model_config_json, source);
  if (state.lora_json.empty()) return model_flat_tensors(config, source);
  nlohmann::json lora_json = nlohmann::json::parse(state.lora_json, nullptr, false);
  if (lora_json.is_discarded())
    throw Error(path + ": attribute lora_json is not JSON; the checkpoint is damaged");
  const LoraSpec lora = LoraSpec::from_json(lora_json, config, path + " (attribute lora_json)");
  return model_flat_tensors(config, source, &lora);
}

CheckpointExport export_checkpoint_safetensors(const std::string& path, const std::string& output,
                                               at::ScalarType dtype) {
  if (dtype != at::kFloat && dtype != at::kHalf && dtype != at::kBFloat16)
    throw Error(output + ": weights can be exported as float32, float16 or bfloat16, not " +
                std::string(c10::toString(dtype)));
  CheckpointReader reader(path, MPI_COMM_SELF);
  CheckpointExport out;
  out.state = read_train_state(reader);
  out.config = EncoderConfig::from_json(out.state.model_config_json, path + " (attribute model_config_json)");
  if (!out.state.lora_json.empty())
    throw Error(path + " is a LoRA checkpoint (the adapter and the task's head, not the base): export writes it as a "
                "PEFT adapter folder, or with --merge as a whole model folder");
  const std::vector<FlatTensor> layout = model_flat_tensors(out.config, path + " (attribute model_config_json)");
  check_model_group(reader, layout);

  // HF's state dict in its order: the checkpointed tensors, and the fixed ones
  // (DistilBERT's sinusoidal positions) computed from the config where the plan puts them.
  const std::vector<ParameterSpec> plan = parameter_plan(out.config);
  std::vector<SafetensorsTensorSpec> specs;
  for (const auto& p : plan) specs.push_back({p.name, dtype, p.shape});
  SafetensorsStreamWriter writer(output, std::move(specs));
  for (const auto& p : plan) {
    // One tensor alive at a time: `stored` is dropped at the end of the
    // iteration, before the next read.
    const at::Tensor stored = p.trainable ? reader.read_tensor(model_group(), p.name) : fixed_tensor(p);
    const int64_t stored_bytes = stored.numel() * static_cast<int64_t>(stored.element_size());
    const std::size_t scratch = writer.write_next_converting(p.name, stored);
    out.model_bytes += stored_bytes;
    out.largest_tensor_bytes = std::max(out.largest_tensor_bytes, stored_bytes);
    out.peak_bytes_held = std::max(out.peak_bytes_held, stored_bytes + static_cast<int64_t>(scratch));
    ++out.tensors;
  }
  writer.commit();
  out.file_bytes = writer.file_bytes();
  return out;
}

bool is_checkpoint_file(const std::string& path) {
  struct stat info {};
  if (stat(path.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) return false;
  static const char kSignature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};
  char head[8] = {0};
  std::ifstream file(path, std::ios::binary);
  return file.read(head, sizeof(head)) && std::memcmp(head, kSignature, sizeof(head)) == 0;
}

}  // namespace shardtrain
