#include "shardtrain/train/checkpoint_model.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>

#include "shardtrain/core/check.h"
#include "shardtrain/model/safetensors.h"
#include "shardtrain/optim/param_layout.h"

namespace shardtrain {

CheckpointModel load_checkpoint_model(const std::string& path, MPI_Comm comm) {
  CheckpointReader reader(path, comm);
  CheckpointModel out;
  out.state = read_train_state(reader);
  out.config = BertConfig::from_json(out.state.model_config_json, path + " (attribute model_config_json)");
  out.model = std::make_shared<BertForSequenceClassification>(out.config);
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

std::vector<FlatTensor> model_flat_tensors(const BertConfig& config, const std::string& source) {
  config.validate(source);
  // The names and shapes come from the model code itself, so they cannot drift
  // from state_dict(): a skeleton with the same layer count whose sizes are
  // distinct small primes (34 = 2 heads x 17, so a head-sized dimension would
  // not pass for a hidden one); each of its dimensions is mapped back to the
  // real size it stands for.
  BertConfig skeleton = config;
  skeleton.vocab_size = 3;
  skeleton.hidden_size = 34;
  skeleton.num_attention_heads = 2;
  skeleton.intermediate_size = 5;
  skeleton.max_position_embeddings = 7;
  skeleton.type_vocab_size = 11;
  skeleton.pad_token_id = 0;
  skeleton.problem_type = "";
  skeleton.set_num_labels(13);
  const std::map<int64_t, int64_t> real_size = {{3, config.vocab_size},
                                                {34, config.hidden_size},
                                                {5, config.intermediate_size},
                                                {7, config.max_position_embeddings},
                                                {11, config.type_vocab_size},
                                                {13, config.num_labels}};
  const BertForSequenceClassification model(skeleton);
  std::vector<FlatTensor> out;
  int64_t offset = 0;
  for (const auto& [name, parameter] : model.state_dict()) {
    FlatTensor tensor{name, {}, offset};
    int64_t numel = 1;
    for (int64_t d : parameter.sizes()) {
      const auto found = real_size.find(d);
      ST_ASSERT(found != real_size.end(), "model_flat_tensors: " + name + " has a dimension (" + std::to_string(d) +
                                              ") that is not a config size");
      tensor.shape.push_back(found->second);
      numel *= found->second;
    }
    offset += numel;
    out.push_back(std::move(tensor));
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
  out.config = BertConfig::from_json(out.state.model_config_json, path + " (attribute model_config_json)");
  const std::vector<FlatTensor> layout = model_flat_tensors(out.config, path + " (attribute model_config_json)");
  check_model_group(reader, layout);

  std::vector<SafetensorsTensorSpec> specs;
  for (const auto& tensor : layout) specs.push_back({tensor.name, dtype, tensor.shape});
  SafetensorsStreamWriter writer(output, std::move(specs));
  for (const auto& tensor : layout) {
    // One tensor alive at a time: `stored` is dropped at the end of the
    // iteration, before the next read.
    const at::Tensor stored = reader.read_tensor(model_group(), tensor.name);
    const int64_t stored_bytes = stored.numel() * static_cast<int64_t>(stored.element_size());
    const std::size_t scratch = writer.write_next_converting(tensor.name, stored);
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
