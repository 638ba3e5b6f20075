#include "shardtrain/model/hf_folder.h"

#include <ATen/ATen.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"
#include "shardtrain/core/json_read.h"
#include "shardtrain/model/family_spec.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/model/parameter_plan.h"
#include "shardtrain/core/text.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;

bool starts_with(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string python_list(const std::vector<std::string>& names) {
  std::string out = "[";
  for (std::size_t i = 0; i < names.size(); ++i) out += (i ? ", '" : "'") + names[i] + "'";
  return out + "]";
}

// The name the model uses for a checkpoint tensor, as transformers' loader
// rewrites it; "" for tensors HF drops silently (buffers).
std::string model_key(const std::string& name, const EncoderConfig& config) {
  const std::string base = config.base_prefix();
  for (const char* buffer : {"embeddings.position_ids", "embeddings.token_type_ids"})
    if (name == buffer || name == base + buffer) return "";
  std::string key = name;
  // transformers' _fix_key: TF-era checkpoints call LayerNorm parameters gamma/beta.
  if (ends_with(key, ".gamma")) key = key.substr(0, key.size() - 5) + "weight";
  if (ends_with(key, ".beta")) key = key.substr(0, key.size() - 4) + "bias";
  // A bare base-model checkpoint lacks the base_model_prefix ("bert.", "model.", ...).
  for (const std::string& part : family_spec(config.family).base_modules)
    if (starts_with(key, part)) key = base + key;
  return key;
}

std::map<std::string, at::Tensor> normalise(const NamedTensors& checkpoint, const EncoderConfig& config,
                                            const std::string& source, std::vector<std::string>* renamed) {
  std::map<std::string, at::Tensor> out;
  std::map<std::string, std::string> origin;
  for (const auto& [name, tensor] : checkpoint) {
    const std::string key = model_key(name, config);
    if (key.empty()) continue;
    if (key != name && renamed) renamed->push_back(name + " -> " + key);
    if (out.count(key))
      throw Error(source + ": tensors '" + origin[key] + "' and '" + name + "' both map to '" + key + "'");
    out[key] = tensor;
    origin[key] = name;
  }
  return out;
}

// Copies a checkpoint tensor into a model tensor of the same shape.
void copy_checked(at::Tensor& param, const at::Tensor& value, const std::string& name, const std::string& source) {
  if (value.sizes() != param.sizes())
    throw Error(source + ": tensor '" + name + "' has shape " + shape_text(value.sizes()) +
                " in the checkpoint but the model (config.json) expects " + shape_text(param.sizes()));
  if (!at::isFloatingType(value.scalar_type()))
    throw Error(source + ": tensor '" + name + "' has non-floating dtype " +
                std::string(c10::toString(value.scalar_type())));
  // As checkpoints are checked on every read: NaN or infinite weights give
  // NaN logits and a meaningless accuracy or loss, never an error of their own.
  const int64_t non_finite = value.numel() - at::isfinite(value).sum().item<int64_t>();
  if (non_finite > 0)
    throw Error(source + ": tensor '" + name + "' holds " + std::to_string(non_finite) +
                " non-finite values (NaN or infinity); refusing to load it (the model was saved from a run that "
                "diverged, or the file is damaged)");
  param.copy_(value);
}

}  // namespace

std::string HfLoadReport::message() const {
  std::string out;
  if (!unexpected_keys.empty()) {
    out += "Some weights of the model checkpoint at " + folder + " were not used when initializing " +
           architecture + ": " + python_list(unexpected_keys) + "\n- This IS expected if you are initializing " +
           architecture +
           " from the checkpoint of a model trained on another task or with another architecture (e.g. "
           "initializing a BertForSequenceClassification model from a BertForPreTraining model).\n- This IS NOT "
           "expected if you are initializing " +
           architecture +
           " from the checkpoint of a model that you expect to be exactly identical (initializing a "
           "BertForSequenceClassification model from a BertForSequenceClassification model).";
  }
  if (!replaced_head.empty()) {
    if (!out.empty()) out += "\n";
    out += folder + " holds a " + replaced_head + " head; its weights are not used and a new " + architecture +
           " head is initialized as transformers initializes it";
  }
  if (!missing_keys.empty()) {
    if (!out.empty()) out += "\n";
    out += "Some weights of " + architecture + " were not initialized from the model checkpoint at " +
           folder + " and are newly initialized: " + python_list(missing_keys) + "\n" +
           std::to_string(missing_keys.size()) + " of the model's " + std::to_string(num_model_tensors) +
           " tensors are newly initialized, " + std::to_string(num_model_tensors - missing_keys.size()) +
           " loaded.\nYou should probably TRAIN this model on a down-stream task to be able to use it for predictions "
           "and inference.";
  }
  return out;
}

NamedTensors read_hf_weights(const std::string& folder) {
  const fs::path dir(folder);
  if (!fs::is_directory(dir)) throw Error(folder + ": model folder does not exist (model.path)");
  const fs::path single = dir / "model.safetensors";
  const fs::path index = dir / "model.safetensors.index.json";
  if (fs::exists(single)) return SafetensorsFile(single.string()).all_tensors();
  if (fs::exists(index)) {
    const auto weight_map = read_safetensors_index(index.string());
    std::map<std::string, std::vector<std::string>> by_shard;
    for (const auto& [name, shard] : weight_map) by_shard[shard].push_back(name);
    NamedTensors out;
    std::map<std::string, std::string> shard_of;
    for (const auto& [shard, names] : by_shard) {
      const fs::path shard_path = dir / shard;
      if (!fs::exists(shard_path))
        throw Error(index.string() + ": shard \"" + shard + "\" named in weight_map is missing from " + folder);
      SafetensorsFile file(shard_path.string());
      for (const auto& name : names)
        if (!file.contains(name))
          throw Error(index.string() + ": weight_map puts '" + name + "' in " + shard + ", but that shard lacks it");
      // Every tensor of the shard, as transformers loads a shard whole: one
      // the index forgot is loaded, not left random.
      for (auto& [name, tensor] : file.all_tensors()) {
        const auto [at, inserted] = shard_of.emplace(name, shard);
        if (!inserted)
          throw Error(index.string() + ": tensor '" + name + "' is in two shards, " + at->second + " and " + shard +
                      "; keep it in one");
        out.emplace_back(name, std::move(tensor));
      }
    }
    return out;
  }
  for (const char* pickle : {"pytorch_model.bin", "pytorch_model.bin.index.json"})
    if (fs::exists(dir / pickle))
      throw Error(folder + ": has only " + pickle +
                  " (a Python pickle); shardtrain never loads pickles because they can run arbitrary code. "
                  "Provide model.safetensors instead, e.g. in Python: "
                  "AutoModelForSequenceClassification.from_pretrained(folder).save_pretrained(folder, "
                  "safe_serialization=True)");
  throw Error(folder + ": no model.safetensors or model.safetensors.index.json (TF/Flax weights are not supported)");
}

HfLoadReport load_hf_weights(TaskModel& model, const NamedTensors& checkpoint, uint64_t init_seed,
                             const std::string& source) {
  HfLoadReport report;
  report.folder = source;
  report.architecture = model.config().architecture();
  std::map<std::string, at::Tensor> tensors = normalise(checkpoint, model.config(), source, &report.renamed_keys);

  std::set<std::string> used;
  {
    at::NoGradGuard no_grad;
    const NamedTensors parameters = model.state_dict();
    report.num_model_tensors = parameters.size();
    // Not one tensor the model expects: every weight would be random, with
    // only a warning (a folder of another family, a wrong model_type).
    bool any = false;
    for (const auto& [name, param] : parameters) any = any || tensors.count(name) > 0;
    if (!any)
      throw Error(source + ": the weights hold none of the " + std::to_string(parameters.size()) + " tensors " +
                  report.architecture + " expects (e.g. '" + (parameters.empty() ? "" : parameters.front().first) +
                  "')" +
                  (checkpoint.empty() ? std::string(": there are no tensors")
                                      : "; its " + std::to_string(checkpoint.size()) + " tensors are named like '" +
                                            clip_for_message(checkpoint.front().first, 80) + "'") +
                  ". Is config.json's model_type (\"" + model.config().model_type +
                  "\") the family these weights were saved from?");
    for (auto& [name, param] : model.state_dict()) {
      auto found = tensors.find(name);
      if (found == tensors.end()) {
        report.missing_keys.push_back(name);
        continue;
      }
      copy_checked(param, found->second, name, source);
      used.insert(name);
    }
    // Fixed tensors (DistilBERT's sinusoidal positions) load when present, as
    // in HF, and are computed from the config otherwise.
    for (auto& [name, tensor] : model.fixed_tensors()) {
      auto found = tensors.find(name);
      if (found == tensors.end()) continue;
      copy_checked(tensor, found->second, name, source);
      used.insert(name);
    }
  }
  // Tensors transformers ignores when the model lacks them
  // (_keys_to_ignore_on_load_unexpected, FamilySpec::ignored_checkpoint_keys).
  const std::vector<std::string>& ignored = family_spec(model.config().family).ignored_checkpoint_keys;
  auto is_ignored = [&](const std::string& key) {
    for (const std::string& part : ignored)
      if (key.find(part) != std::string::npos) return true;
    return false;
  };
  for (const auto& [name, tensor] : checkpoint) {
    const std::string key = model_key(name, model.config());
    if (is_ignored(key)) continue;
    if (!key.empty() && !used.count(key)) report.unexpected_keys.push_back(name);
  }
  if (!report.missing_keys.empty()) model.init_weights(init_seed, report.missing_keys);
  return report;
}

HfModel load_hf_folder(const std::string& folder, const HfLoadOptions& options) {
  if (!fs::is_directory(folder)) throw Error(folder + ": model folder does not exist (model.path)");
  const std::string config_path = (fs::path(folder) / "config.json").string();
  if (!fs::exists(config_path)) throw Error(folder + ": no config.json in the model folder");
  HfModel out;
  // transformers' AutoConfig refuses a config.json without model_type; read
  // as BERT, another family's weights would all be left random.
  require_regular_file(config_path, "model config");
  const std::string config_text = read_file(config_path, "model config");
  const nlohmann::json config_json = parse_user_json(config_text, config_path);
  if (config_json.is_object() && !config_json.contains("model_type"))
    throw Error(config_path + ": no \"model_type\" key, so the model family is unknown (transformers' AutoConfig "
                "refuses it too); add the family the weights were saved from, e.g. \"model_type\": \"bert\" (" +
                model_type_names() + ")");
  out.config = EncoderConfig::from_json(config_text, config_path);
  if (options.hidden_dropout_prob) out.config.hidden_dropout_prob = *options.hidden_dropout_prob;
  if (options.attention_probs_dropout_prob)
    out.config.attention_probs_dropout_prob = *options.attention_probs_dropout_prob;

  NamedTensors checkpoint = read_hf_weights(folder);
  std::string replaced_head;
  if (options.task && *options.task != out.config.task) {
    if (out.config.has_task_head) {
      // The folder's head belongs to another task: its own tensors (not the
      // base model's, such as BERT's pooler) stay unused, and the new task's
      // head is initialised.
      replaced_head = out.config.architecture();
      std::set<std::string> head;
      for (const ParameterSpec& p : parameter_plan(out.config))
        if (p.unit == out.config.head_unit() && p.name.rfind(out.config.base_prefix(), 0) != 0)
          head.insert(p.name);
      NamedTensors kept;
      for (auto& [name, tensor] : checkpoint)
        if (!head.count(model_key(name, out.config))) kept.emplace_back(name, tensor);
      checkpoint = std::move(kept);
    }
    out.config.task = *options.task;
  }
  if (options.num_labels && *options.num_labels != out.config.num_labels) {
    std::string classifier;
    for (const ParameterSpec& p : parameter_plan(out.config))
      if (p.slot == Slot::kClassifierWeight) classifier = p.name;
    const at::Tensor* head = nullptr;
    for (const auto& [name, tensor] : checkpoint)
      if (model_key(name, out.config) == classifier) head = &tensor;
    if (head)
      throw Error(folder + ": num_labels " + std::to_string(*options.num_labels) +
                  " differs from the checkpoint's classifier head (" + std::to_string(head->size(0)) +
                  " labels); use a checkpoint without a classifier (e.g. the pretrained model) or num_labels " +
                  std::to_string(head->size(0)));
    out.config.set_num_labels(*options.num_labels);
    if (out.config.problem_type == "regression" && *options.num_labels != 1) out.config.problem_type.clear();
  }
  out.config.validate(config_path);
  out.model = std::make_shared<TaskModel>(out.config);
  out.report = load_hf_weights(*out.model, checkpoint, options.init_seed, folder);
  out.report.replaced_head = replaced_head;
  return out;
}

std::string hf_config_json(const EncoderConfig& config, at::ScalarType dtype) {
  nlohmann::json json = nlohmann::json::parse(config.to_json());
  json["torch_dtype"] = dtype == at::kFloat ? "float32" : dtype == at::kHalf ? "float16" : "bfloat16";
  return json.dump(2) + "\n";
}

void save_hf_folder(const TaskModel& model, const std::string& folder,
                    const HfSaveOptions& options) {
  if (options.dtype != at::kFloat && options.dtype != at::kHalf && options.dtype != at::kBFloat16)
    throw Error(folder + ": weights can be saved as float32, float16 or bfloat16, not " +
                std::string(c10::toString(options.dtype)));
  std::error_code error;
  fs::create_directories(folder, error);
  if (error) throw Error(folder + ": cannot create output folder: " + error.message());

  const std::string config_text = hf_config_json(model.config(), options.dtype);
  // Every file through core/fs_util.h's writer: complete or not there, a
  // link followed, never an existing file clobbered by a temporary name.
  write_file_atomic((fs::path(folder) / "config.json").string(), config_text);

  NamedTensors tensors;
  // HF's state-dict order: the fixed tensors sit where the plan puts them.
  for (const ParameterSpec& p : parameter_plan(model.config()))
    tensors.emplace_back(p.name, model.parameter(p.name).detach().to(options.dtype));
  write_safetensors((fs::path(folder) / "model.safetensors").string(), tensors);

  for (const auto& file : options.copy_files) {
    if (!fs::is_regular_file(file)) throw Error(file + ": file to copy into " + folder + " does not exist");
    write_file_atomic((fs::path(folder) / fs::path(file).filename()).string(),
                      read_file(file, "file to copy into " + folder));
  }
}

}  // namespace shardtrain
