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

namespace shardtrain {

CheckpointModel load_checkpoint_model(const std::string& path, MPI_Comm comm) {
  CheckpointReader reader(path, comm);
  CheckpointModel out;
  out.state = read_train_state(reader);
  out.config = EncoderConfig::from_json(out.state.model_config_json, path + " (attribute model_config_json)");
  out.model = std::make_shared<TaskModel>(out.config);
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

std::vector<FlatTensor> model_flat_tensors(const EncoderConfig& config, const std::string& source) {
  config.validate(source);
  // The model allocates exactly parameter_plan()'s trainable tensors, in its
  // order, so the layout cannot drift from state_dict().
  std::vector<FlatTensor> out;
  int64_t offset = 0;
  for (const ParameterSpec& p : parameter_plan(config)) {
    if (!p.trainable) continue;
    out.push_back(FlatTensor{p.name, p.shape, offset});
    offset += p.numel();
  }
  return out;
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
