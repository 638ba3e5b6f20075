#include "shardtrain/train/train_checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>

#include "shardtrain/core/check.h"
#include "shardtrain/data/sampler.h"
#include "shardtrain/model/safetensors.h"

namespace shardtrain {
namespace {

constexpr const char* kModelGroup = "model";
constexpr const char* kExpAvgGroup = "optim/exp_avg";
constexpr const char* kExpAvgSqGroup = "optim/exp_avg_sq";

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// Whether every rank has `value`; Error on all ranks (naming `what`) when the
// ranks disagree, because the collective calls that follow would not match.
bool agreed_flag(bool value, MPI_Comm comm, const std::string& what) {
  int mine = value ? 1 : 0, low = 0, high = 0;
  ST_CHECK_MPI(MPI_Allreduce(&mine, &low, 1, MPI_INT, MPI_MIN, comm));
  ST_CHECK_MPI(MPI_Allreduce(&mine, &high, 1, MPI_INT, MPI_MAX, comm));
  if (low != high) throw Error(what + ": some ranks pass optimizer state and others do not");
  return low == 1;
}

// The part's tensors, flat, float32 (the dtype the checkpoint stores).
at::Tensor flat_float(const at::Tensor& tensor) { return tensor.reshape({-1}).to(at::kFloat); }

// A malformed FlatPart is a bug in the caller, not a user error; asserting
// aborts the job instead of leaving the other ranks waiting in a collective.
void check_part_sizes(const FlatPart& part, const std::string& where) {
  ST_ASSERT(part.params.defined(), where + ": FlatPart.params is undefined");
  ST_ASSERT(part.begin >= 0, where + ": FlatPart.begin is negative");
  ST_ASSERT(part.exp_avg.defined() == part.exp_avg_sq.defined(),
            where + ": FlatPart has only one of exp_avg / exp_avg_sq");
  ST_ASSERT(!part.exp_avg.defined() ||
                (part.exp_avg.numel() == part.params.numel() && part.exp_avg_sq.numel() == part.params.numel()),
            where + ": FlatPart exp_avg / exp_avg_sq must have params.numel() elements");
}

// Names and shapes of `group` against the layout; the same answer on every rank
// because every rank reads the same file metadata.
void check_group_matches(const CheckpointReader& reader, const std::string& group,
                         const std::vector<FlatTensor>& layout) {
  const std::string& path = reader.path();
  const size_t slash = group.rfind('/');
  if (slash != std::string::npos && !reader.has(group.substr(0, slash), group.substr(slash + 1)))
    throw Error(path + ": the checkpoint has no optimizer state (/" + group +
                " is missing); it was written with the model only");
  const std::vector<std::string> stored = reader.names(group);
  std::map<std::string, const FlatTensor*> expected;
  for (const auto& tensor : layout) expected[tensor.name] = &tensor;
  for (const auto& name : stored)
    if (!expected.count(name))
      throw Error(path + ": tensor /" + group + "/" + name +
                  " is not a parameter of this model (the checkpoint belongs to another model architecture)");
  for (const auto& tensor : layout) {
    if (!std::binary_search(stored.begin(), stored.end(), tensor.name))
      throw Error(path + ": the checkpoint has no tensor /" + group + "/" + tensor.name +
                  " (the checkpoint belongs to another model architecture)");
    const std::vector<int64_t> shape = reader.shape(group, tensor.name);
    if (shape != tensor.shape)
      throw Error(path + ": tensor /" + group + "/" + tensor.name + " has shape " + shape_string(shape) +
                  " in the checkpoint but the model's is " + shape_string(tensor.shape));
  }
}

// Reads /group into the parts' tensors (float32 parts starting at their
// `begin`), in one collective read: through contiguous CPU float32 buffers
// where a part's tensor is anything else.
void read_group(CheckpointReader& reader, const std::string& group, const std::vector<FlatTensor>& layout,
                std::vector<FlatPart>& parts, at::Tensor FlatPart::*member) {
  std::vector<TensorSlice> slices;
  std::vector<std::pair<at::Tensor*, at::Tensor>> copies;  // (part tensor, staging buffer)
  for (FlatPart& part : parts) {
    at::Tensor& flat = part.*member;
    const bool direct = flat.device().is_cpu() && flat.scalar_type() == at::kFloat && flat.is_contiguous();
    at::Tensor buffer =
        direct ? flat.view({-1}) : at::empty({flat.numel()}, at::TensorOptions().dtype(at::kFloat));
    if (!direct) copies.emplace_back(&flat, buffer);
    for (TensorSlice& slice : slices_of_shard(layout, part.begin, buffer)) slices.push_back(std::move(slice));
  }
  reader.read(group, slices);
  for (auto& copy : copies) copy.first->copy_(copy.second.view(copy.first->sizes()));
}

// Every part's slices of one group, for one collective write.
std::vector<TensorSlice> slices_of_parts(const std::vector<FlatTensor>& layout, const std::vector<FlatPart>& parts,
                                         at::Tensor FlatPart::*member) {
  std::vector<TensorSlice> slices;
  for (const FlatPart& part : parts)
    for (TensorSlice& slice : slices_of_shard(layout, part.begin, flat_float(part.*member)))
      slices.push_back(std::move(slice));
  return slices;
}

bool parts_have_optimizer(const std::vector<FlatPart>& parts, const std::string& where) {
  ST_ASSERT(!parts.empty(), where + ": no FlatPart (a rank that owns nothing passes one empty part)");
  for (const FlatPart& part : parts) {
    check_part_sizes(part, where);
    ST_ASSERT(part.exp_avg.defined() == parts.front().exp_avg.defined(),
              where + ": some FlatParts carry optimizer state and others do not");
  }
  return parts.front().exp_avg.defined();
}

}  // namespace

std::vector<FlatTensor> flat_tensors(const ParamLayout& layout) {
  std::vector<FlatTensor> out;
  out.reserve(layout.slots().size());
  for (const auto& slot : layout.slots()) out.push_back(FlatTensor{slot.name, slot.shape, slot.offset});
  return out;
}

void write_train_checkpoint(const std::string& final_path, const std::vector<FlatTensor>& layout,
                            const FlatPart& part, const TrainState& state, MPI_Comm comm) {
  write_train_checkpoint(final_path, layout, std::vector<FlatPart>{part}, state, comm);
}

void write_train_checkpoint(const std::string& final_path, const std::vector<FlatTensor>& layout,
                            const std::vector<FlatPart>& parts, const TrainState& state, MPI_Comm comm) {
  const bool with_optimizer = agreed_flag(parts_have_optimizer(parts, final_path), comm, final_path);

  CheckpointWriter writer(final_path, comm);
  writer.write_group(kModelGroup, slices_of_parts(layout, parts, &FlatPart::params));
  if (with_optimizer) {
    writer.write_group(kExpAvgGroup, slices_of_parts(layout, parts, &FlatPart::exp_avg));
    writer.write_group(kExpAvgSqGroup, slices_of_parts(layout, parts, &FlatPart::exp_avg_sq));
  }
  writer.set_attribute("kind", kTrainCheckpointKind);
  writer.set_attribute("step", state.step);
  writer.set_attribute("epoch", state.epoch);
  writer.set_attribute("batches_consumed", state.batches_consumed);
  writer.set_attribute("seed", state.seed);
  writer.set_attribute("num_training_steps", state.num_training_steps);
  writer.set_attribute("warmup_steps", state.warmup_steps);
  writer.set_attribute("base_lr", state.base_lr);
  writer.set_attribute("world_size", state.world_size);
  writer.set_attribute("global_batch_size", state.global_batch_size);
  writer.set_attribute("strategy", state.strategy);
  writer.set_attribute("config_toml", state.config_toml);
  writer.set_attribute("model_config_json", state.model_config_json);
  writer.set_attribute("vocab_text", state.vocab_text);
  writer.set_attribute("lowercase", state.lowercase);
  writer.set_attribute("metrics_json", state.metrics_json);
  writer.set_attribute("loss_sum", state.loss_sum);
  writer.set_attribute("loss_count", state.loss_count);
  writer.set_attribute("train_seconds", state.train_seconds);
  writer.commit();
}

TrainState read_train_state(const CheckpointReader& reader) {
  const std::string& path = reader.path();
  if (!reader.has_attribute("kind"))
    throw Error(path + " is a shardtrain checkpoint but not a training checkpoint (no 'kind' attribute)");
  const std::string kind = reader.string_attribute("kind");
  if (kind != kTrainCheckpointKind)
    throw Error(path + " is a checkpoint of kind '" + kind + "', not a training checkpoint ('" +
                kTrainCheckpointKind + "')");
  TrainState state;
  state.step = reader.int_attribute("step");
  state.epoch = reader.int_attribute("epoch");
  state.batches_consumed = reader.int_attribute("batches_consumed");
  state.seed = reader.int_attribute("seed");
  state.num_training_steps = reader.int_attribute("num_training_steps");
  state.warmup_steps = reader.int_attribute("warmup_steps");
  state.base_lr = reader.double_attribute("base_lr");
  state.world_size = reader.int_attribute("world_size");
  state.global_batch_size = reader.int_attribute("global_batch_size");
  state.strategy = reader.string_attribute("strategy");
  state.config_toml = reader.string_attribute("config_toml");
  state.model_config_json = reader.string_attribute("model_config_json");
  state.vocab_text = reader.string_attribute("vocab_text");
  state.lowercase = reader.int_attribute("lowercase");
  state.metrics_json = reader.string_attribute("metrics_json");
  state.loss_sum = reader.double_attribute("loss_sum");
  state.loss_count = reader.int_attribute("loss_count");
  state.train_seconds = reader.double_attribute("train_seconds");
  return state;
}

void read_train_part(CheckpointReader& reader, const std::vector<FlatTensor>& layout, FlatPart& part) {
  std::vector<FlatPart> parts{part};  // shares part's tensors
  read_train_parts(reader, layout, parts, part.exp_avg.defined());
}

void read_train_parts(CheckpointReader& reader, const std::vector<FlatTensor>& layout, std::vector<FlatPart>& parts,
                      bool with_optimizer) {
  for (const FlatPart& part : parts) {
    check_part_sizes(part, reader.path());
    ST_ASSERT(part.exp_avg.defined() == with_optimizer,
              reader.path() + ": read_train_parts: a part's optimizer tensors do not match with_optimizer");
  }
  check_group_matches(reader, kModelGroup, layout);
  if (with_optimizer) {
    check_group_matches(reader, kExpAvgGroup, layout);
    check_group_matches(reader, kExpAvgSqGroup, layout);
  }
  read_group(reader, kModelGroup, layout, parts, &FlatPart::params);
  if (with_optimizer) {
    read_group(reader, kExpAvgGroup, layout, parts, &FlatPart::exp_avg);
    read_group(reader, kExpAvgSqGroup, layout, parts, &FlatPart::exp_avg_sq);
  }
}

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
  check_group_matches(reader, kModelGroup, layout);

  std::vector<SafetensorsTensorSpec> specs;
  for (const auto& tensor : layout) specs.push_back({tensor.name, dtype, tensor.shape});
  SafetensorsStreamWriter writer(output, std::move(specs));
  for (const auto& tensor : layout) {
    // One tensor alive at a time: `stored` is dropped at the end of the
    // iteration, before the next read.
    const at::Tensor stored = reader.read_tensor(kModelGroup, tensor.name);
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

uint64_t train_rng_seed(int64_t seed, int64_t step, int64_t micro_step, int rank) {
  // Each stage is a bijection of its input (SplitMix64's first output), so two
  // tuples that differ in one field never share a seed.
  uint64_t hash = SplitMix64(static_cast<uint64_t>(seed)).next();
  hash = SplitMix64(hash ^ static_cast<uint64_t>(step)).next();
  hash = SplitMix64(hash ^ static_cast<uint64_t>(micro_step)).next();
  hash = SplitMix64(hash ^ static_cast<uint64_t>(static_cast<int64_t>(rank))).next();
  return hash;
}

}  // namespace shardtrain
