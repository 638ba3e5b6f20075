// EncoderConfig from and to HF config.json (docs/DESIGN.md, "Model
// families"): the keys every family shares (vocabulary, positions, labels,
// the task's class) and the checks every family takes; each family's own keys,
// defaults and checks are in its file (src/model/families/, FamilySpec).
#include "shardtrain/model/encoder_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "model/config_json.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"
#include "shardtrain/core/json_read.h"
#include "shardtrain/core/limits.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/text.h"
#include "shardtrain/model/family_spec.h"
#include "shardtrain/tasks/task_rules.h"

namespace shardtrain {
namespace {

using json = nlohmann::json;
using detail::config_key_error;
using detail::read_double;
using detail::read_int;
using detail::read_string;

// The config.json keys of a family that EncoderConfig models (the rest go to extra_json).
std::set<std::string> modelled_keys(const FamilySpec& spec) {
  std::set<std::string> keys = {"vocab_size", "max_position_embeddings", "initializer_range", "pad_token_id",
                                "problem_type", "id2label", "label2id", "num_labels", "model_type", "architectures",
                                "torch_dtype"};
  keys.insert(spec.keys.begin(), spec.keys.end());
  return keys;
}

// The task of config.json's first architecture, when it is one of the task
// classes ("...ForTokenClassification" etc.).
std::optional<Task> task_of_architectures(const json& j) {
  if (!j.contains("architectures") || !j["architectures"].is_array() || j["architectures"].empty() ||
      !j["architectures"][0].is_string())
    return std::nullopt;
  return task_of_class(j["architectures"][0].get<std::string>());
}

void read_labels(const json& j, EncoderConfig& c, const std::string& source) {
  if (j.contains("id2label")) {
    c.id2label = detail::read_id2label(j, source);
    if (j.contains("label2id") && !j["label2id"].is_null()) detail::check_label2id(j, c.id2label, source);
    c.num_labels = static_cast<int64_t>(c.id2label.size());
    if (j.contains("num_labels") && read_int(j, "num_labels", 0, source) != c.num_labels)
      config_key_error(source, "num_labels", "is " + clip_for_message(j["num_labels"].dump(), 40) +
                                                 " but id2label has " + std::to_string(c.num_labels) + " entries");
  } else {
    const int64_t n = read_int(j, "num_labels", 2, source);
    if (n > kMaxNumLabels)
      config_key_error(source, "num_labels",
                       std::to_string(n) + " is more than " + std::to_string(kMaxNumLabels) + " labels");
    c.set_num_labels(n);
  }
}

// About how many parameters the config makes: none that no machine holds.
void check_size(const EncoderConfig& c, const std::string& source, const char* hidden_key) {
  // In doubles, so that no product overflows before the check.
  const double D = static_cast<double>(c.hidden_size), I = static_cast<double>(c.intermediate_size);
  const double E = static_cast<double>(c.embedding_width());
  const bool relative = c.has_relative_unit();  // DeBERTa: 2 position projections and the relative embeddings
  const double parameters =
      (static_cast<double>(c.vocab_size) + static_cast<double>(c.max_position_embeddings) +
       static_cast<double>(c.type_vocab_size)) * E + E * D +
      static_cast<double>(c.num_hidden_layers) * ((relative ? 6 : 4) * D * D + 3 * D * I) +
      D * static_cast<double>(c.num_labels) + (relative ? 2.0 * static_cast<double>(c.relative_span()) * D : 0.0);
  if (parameters > std::ldexp(1.0, 50))
    config_key_error(source, hidden_key,
                     str_format("this config makes a model of about %.3g parameters (vocab_size %lld, hidden size "
                                "%lld, %lld layers, intermediate size %lld): no machine holds it",
                                parameters, static_cast<long long>(c.vocab_size), static_cast<long long>(c.hidden_size),
                                static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.intermediate_size)));
}

}  // namespace

EncoderConfig EncoderConfig::from_json(const std::string& text, const std::string& source) {
  const json j = parse_user_json(text, source);  // depth and duplicate keys: core/json_read.h
  if (!j.is_object()) throw Error(source + ": expected a JSON object");

  const std::string model_type = read_string(j, "model_type", "bert", source);
  const FamilySpec* spec = family_of_model_type(model_type);
  if (!spec)
    config_key_error(source, "model_type",
                     "is \"" + clip_for_message(model_type, 60) + "\"; shardtrain trains " + model_type_names());
  for (const char* key : {"is_decoder", "add_cross_attention"})
    if (j.contains(key) && j[key].is_boolean() && j[key].get<bool>())
      config_key_error(source, key, "is true; only encoder-only models are supported");

  // The defaults of the family's transformers config class.
  EncoderConfig c;
  c.family = spec->family;
  c.model_type = model_type;
  spec->defaults(c);
  c.vocab_size = read_int(j, "vocab_size", c.vocab_size, source);
  c.max_position_embeddings = read_int(j, "max_position_embeddings", c.max_position_embeddings, source);
  c.initializer_range = read_double(j, "initializer_range", c.initializer_range, source);
  c.pad_token_id = read_int(j, "pad_token_id", c.pad_token_id, source);
  c.problem_type = read_string(j, "problem_type", "", source);
  spec->read(j, c, source);
  read_labels(j, c, source);
  if (const std::optional<Task> task = task_of_architectures(j)) {
    c.task = *task;
    c.has_task_head = true;
  }

  const std::set<std::string> modelled = modelled_keys(*spec);
  json extra = json::object();
  for (const auto& item : j.items())
    if (!modelled.count(item.key())) extra[item.key()] = item.value();
  c.extra_json = extra.dump();

  c.validate(source);
  return c;
}

EncoderConfig EncoderConfig::from_file(const std::string& path) {
  require_regular_file(path, "model config");
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open model config");
  std::stringstream text;
  text << in.rdbuf();
  return from_json(text.str(), path);
}

int64_t EncoderConfig::head_outputs() const { return task_rules(task).head_outputs(num_labels); }

bool EncoderConfig::has_label_names() const {
  for (size_t i = 0; i < id2label.size(); ++i)
    if (id2label[i] != "LABEL_" + std::to_string(i)) return true;
  return false;
}

void EncoderConfig::set_num_labels(int64_t n) {
  // Checked here, not only in validate(): the names are allocated right below.
  if (n > kMaxNumLabels)
    throw Error("num_labels = " + std::to_string(n) + " is more than the " + std::to_string(kMaxNumLabels) +
                " labels a classifier may have");
  num_labels = n;
  id2label.clear();
  for (int64_t i = 0; i < std::max<int64_t>(n, 0); ++i) id2label.push_back("LABEL_" + std::to_string(i));
}

void EncoderConfig::validate(const std::string& source) const {
  const FamilySpec& spec = family_spec(family);
  // Errors name the key as this family's config.json spells it.
  const char* hidden_key = spec.key("hidden_size");
  const char* heads_key = spec.key("num_attention_heads");
  detail::check_positive(source, "vocab_size", vocab_size);
  detail::check_positive(source, hidden_key, hidden_size);
  detail::check_positive(source, spec.key("num_hidden_layers"), num_hidden_layers);
  detail::check_positive(source, heads_key, num_attention_heads);
  detail::check_positive(source, spec.key("intermediate_size"), intermediate_size);
  detail::check_positive(source, "max_position_embeddings", max_position_embeddings);
  detail::check_positive(source, "num_labels", num_labels);
  switch (spec.token_types) {
    case TokenTypes::kNone:
      if (type_vocab_size != 0) config_key_error(source, "type_vocab_size", "this family has no token types");
      break;
    case TokenTypes::kOptional:
      if (type_vocab_size < 0) config_key_error(source, "type_vocab_size", "must be >= 0 (0: no token types)");
      break;
    case TokenTypes::kRequired: detail::check_positive(source, "type_vocab_size", type_vocab_size); break;
  }
  // Token ids are int32 in the tokenized data and the collated batches.
  if (vocab_size > std::numeric_limits<int32_t>::max())
    config_key_error(source, "vocab_size",
                     std::to_string(vocab_size) + " is more than " +
                         std::to_string(std::numeric_limits<int32_t>::max()) + " (token ids are 32-bit)");
  if (num_labels > kMaxNumLabels)
    config_key_error(source, "num_labels",
                     std::to_string(num_labels) + " is more than " + std::to_string(kMaxNumLabels) + " labels");
  check_size(*this, source, hidden_key);
  if (hidden_size % num_attention_heads != 0)
    config_key_error(source, hidden_key,
                     std::to_string(hidden_size) + " is not a multiple of " + heads_key + " (" +
                         std::to_string(num_attention_heads) + ")");
  detail::check_probability(source, spec.key("hidden_dropout_prob"), hidden_dropout_prob);
  detail::check_probability(source, spec.key("attention_probs_dropout_prob"), attention_probs_dropout_prob);
  if (classifier_dropout >= 0) detail::check_probability(source, spec.key("classifier_dropout"), classifier_dropout);
  if (!(initializer_range >= 0.0)) config_key_error(source, "initializer_range", "must be >= 0");
  if (!(layer_norm_eps > 0.0)) config_key_error(source, spec.key("layer_norm_eps"), "must be > 0");
  if (pad_token_id < 0 || pad_token_id >= vocab_size)
    config_key_error(source, "pad_token_id",
                     std::to_string(pad_token_id) + " is outside the vocabulary [0, " + std::to_string(vocab_size) +
                         ")");
  detail::check_activation(source, spec.key("hidden_act"), hidden_act);
  spec.validate(*this, source);
  if (!problem_type.empty() && problem_type != "regression" && problem_type != "single_label_classification" &&
      problem_type != "multi_label_classification")
    config_key_error(source, "problem_type",
                     "\"" + clip_for_message(problem_type, 60) +
                         "\" is not one of regression, single_label_classification, multi_label_classification");
  if (problem_type == "regression" && num_labels != 1)
    config_key_error(source, "problem_type", "regression needs num_labels == 1, got " + std::to_string(num_labels));
  if (static_cast<int64_t>(id2label.size()) != num_labels)
    config_key_error(source, "id2label",
                     "has " + std::to_string(id2label.size()) + " entries but num_labels is " +
                         std::to_string(num_labels));
  std::set<std::string> names(id2label.begin(), id2label.end());
  if (names.size() != id2label.size()) config_key_error(source, "id2label", "label names must be distinct");
}

std::string EncoderConfig::architecture() const {
  return std::string(family_spec(family).model_type(model_type).class_prefix) + task_rules(task).class_suffix();
}

std::string EncoderConfig::base_prefix() const {
  const FamilySpec& spec = family_spec(family);
  const char* own = spec.model_type(model_type).base_prefix;
  return own ? own : spec.base_prefix;
}

int64_t EncoderConfig::embedding_width() const {
  return family_spec(family).separate_embedding_width ? embedding_size : hidden_size;
}

int64_t EncoderConfig::max_sequence_length() const {
  return family_spec(family).embeddings(*this).positions_after_padding ? max_position_embeddings - pad_token_id - 1
                                                                       : max_position_embeddings;
}

bool EncoderConfig::has_position_term(const std::string& type) const {
  return std::find(pos_att_type.begin(), pos_att_type.end(), type) != pos_att_type.end();
}

bool EncoderConfig::norm_relative_embeddings() const {
  const std::vector<std::string> parts = detail::split_bar_list(norm_rel_ebd);
  return std::find(parts.begin(), parts.end(), "layer_norm") != parts.end();
}

bool EncoderConfig::is_global_layer(int64_t i) const {
  return !family_spec(family).local_attention_layers || i % global_attn_every_n_layers == 0;
}

std::string EncoderConfig::to_json() const {
  json j = json::parse(extra_json.empty() ? "{}" : extra_json);
  j["architectures"] = {architecture()};
  j["model_type"] = model_type;
  j["vocab_size"] = vocab_size;
  j["max_position_embeddings"] = max_position_embeddings;
  j["initializer_range"] = initializer_range;
  j["pad_token_id"] = pad_token_id;
  family_spec(family).write(*this, j);
  if (!problem_type.empty()) j["problem_type"] = problem_type;
  json id2label_json = json::object(), label2id_json = json::object();
  for (std::size_t i = 0; i < id2label.size(); ++i) {
    id2label_json[std::to_string(i)] = id2label[i];
    label2id_json[id2label[i]] = i;
  }
  j["id2label"] = id2label_json;
  j["label2id"] = label2id_json;
  return j.dump(2) + "\n";
}

EncoderConfig bert_base_cased_config(int64_t num_labels) {
  EncoderConfig c;
  c.vocab_size = 28996;
  c.set_num_labels(num_labels);
  c.extra_json = R"({"gradient_checkpointing": false, "use_cache": true})";
  return c;
}

}  // namespace shardtrain
