// EncoderConfig from and to HF config.json, per family (docs/DESIGN.md, "Model
// families"). Each family's keys and defaults are those of its transformers
// configuration class (BertConfig, RobertaConfig, DistilBertConfig,
// ElectraConfig, ModernBertConfig, DebertaV2Config).
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
#include "shardtrain/tasks/task_rules.h"

namespace shardtrain {
namespace {

using json = nlohmann::json;
using detail::config_key_error;
using detail::read_bool;
using detail::read_double;
using detail::read_int;
using detail::read_string;

const std::vector<std::string>& supported_activations() {
  static const std::vector<std::string> names = {
      "gelu",   "gelu_python", "gelu_new", "gelu_pytorch_tanh", "gelu_accurate", "gelu_fast", "quick_gelu",
      "gelu_10", "relu",       "relu2",    "relu6",             "leaky_relu",    "silu",      "swish",
      "mish",   "tanh",        "sigmoid",  "linear",            "laplace"};
  return names;
}

struct FamilyName {
  const char* model_type;
  ModelFamily family;
};
constexpr FamilyName kModelTypes[] = {
    {"bert", ModelFamily::kBert},           {"roberta", ModelFamily::kRoberta},
    {"xlm-roberta", ModelFamily::kRoberta}, {"camembert", ModelFamily::kRoberta},
    {"distilbert", ModelFamily::kDistilBert}, {"electra", ModelFamily::kElectra},
    {"modernbert", ModelFamily::kModernBert}, {"deberta-v2", ModelFamily::kDebertaV2}};

// The defaults of each family's transformers config class.
EncoderConfig family_defaults(ModelFamily family, const std::string& model_type) {
  EncoderConfig c;
  c.family = family;
  c.model_type = model_type;
  switch (family) {
    case ModelFamily::kBert: break;
    case ModelFamily::kRoberta:
      c.vocab_size = model_type == "xlm-roberta" ? 250002 : model_type == "camembert" ? 32005 : 50265;
      c.pad_token_id = 1;
      break;
    case ModelFamily::kDistilBert:
      c.num_hidden_layers = 6;
      c.type_vocab_size = 0;
      c.classifier_dropout = 0.2;  // seq_classif_dropout
      break;
    case ModelFamily::kElectra:
      c.embedding_size = 128;
      c.hidden_size = 256;
      c.num_attention_heads = 4;
      c.intermediate_size = 1024;
      break;
    case ModelFamily::kModernBert:
      c.vocab_size = 50368;
      c.intermediate_size = 1152;
      c.num_hidden_layers = 22;
      c.max_position_embeddings = 8192;
      c.type_vocab_size = 0;
      c.layer_norm_eps = 1e-5;
      c.pad_token_id = 50283;
      c.hidden_dropout_prob = 0.0;           // mlp_dropout
      c.attention_probs_dropout_prob = 0.0;  // attention_dropout
      c.classifier_dropout = 0.0;
      break;
    case ModelFamily::kDebertaV2:  // DebertaV2Config: deberta-v2-xlarge's shape
      c.vocab_size = 128100;
      c.hidden_size = 1536;
      c.num_hidden_layers = 24;
      c.num_attention_heads = 24;
      c.intermediate_size = 6144;
      c.type_vocab_size = 0;
      c.layer_norm_eps = 1e-7;
      break;
  }
  return c;
}

// The config.json keys of a family that EncoderConfig models (the rest go to extra_json).
std::set<std::string> modelled_keys(ModelFamily family) {
  std::set<std::string> keys = {"vocab_size", "max_position_embeddings", "initializer_range", "pad_token_id",
                                "problem_type", "id2label", "label2id", "num_labels", "model_type", "architectures",
                                "torch_dtype"};
  auto add = [&](std::initializer_list<const char*> more) { keys.insert(more.begin(), more.end()); };
  switch (family) {
    case ModelFamily::kBert:
    case ModelFamily::kRoberta:
    case ModelFamily::kElectra:
      add({"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
           "hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout", "type_vocab_size",
           "layer_norm_eps", "position_embedding_type"});
      if (family == ModelFamily::kElectra) add({"embedding_size", "summary_last_dropout"});
      break;
    case ModelFamily::kDistilBert:
      add({"dim", "n_layers", "n_heads", "hidden_dim", "activation", "dropout", "attention_dropout",
           "seq_classif_dropout", "sinusoidal_pos_embds", "qa_dropout"});
      break;
    case ModelFamily::kModernBert:
      add({"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_activation",
           "mlp_dropout", "attention_dropout", "embedding_dropout", "classifier_dropout", "norm_eps",
           "layer_norm_eps", "global_attn_every_n_layers", "local_attention", "global_rope_theta",
           "local_rope_theta", "attention_bias", "mlp_bias", "norm_bias", "classifier_bias", "classifier_pooling",
           "classifier_activation", "initializer_cutoff_factor", "tie_word_embeddings", "position_embedding_type"});
      break;
    case ModelFamily::kDebertaV2:
      add({"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
           "hidden_dropout_prob", "attention_probs_dropout_prob", "type_vocab_size", "layer_norm_eps",
           "relative_attention", "max_relative_positions", "position_buckets", "pos_att_type", "share_att_key",
           "norm_rel_ebd", "position_biased_input", "pooler_dropout", "pooler_hidden_act", "pooler_hidden_size",
           "cls_dropout"});
      break;
  }
  return keys;
}

// The encoder's shape and dropouts under BERT's key names (BERT, RoBERTa,
// ELECTRA, DeBERTa), read and written back.
void read_bert_shape(const json& j, EncoderConfig& c, const std::string& source) {
  c.hidden_size = read_int(j, "hidden_size", c.hidden_size, source);
  c.num_hidden_layers = read_int(j, "num_hidden_layers", c.num_hidden_layers, source);
  c.num_attention_heads = read_int(j, "num_attention_heads", c.num_attention_heads, source);
  c.intermediate_size = read_int(j, "intermediate_size", c.intermediate_size, source);
  c.hidden_act = read_string(j, "hidden_act", c.hidden_act, source);
  c.hidden_dropout_prob = read_double(j, "hidden_dropout_prob", c.hidden_dropout_prob, source);
  c.attention_probs_dropout_prob =
      read_double(j, "attention_probs_dropout_prob", c.attention_probs_dropout_prob, source);
  c.type_vocab_size = read_int(j, "type_vocab_size", c.type_vocab_size, source);
  c.layer_norm_eps = read_double(j, "layer_norm_eps", c.layer_norm_eps, source);
}

void write_bert_shape(const EncoderConfig& c, json& j) {
  j["hidden_size"] = c.hidden_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["intermediate_size"] = c.intermediate_size;
  j["hidden_act"] = c.hidden_act;
  j["hidden_dropout_prob"] = c.hidden_dropout_prob;
  j["attention_probs_dropout_prob"] = c.attention_probs_dropout_prob;
  j["type_vocab_size"] = c.type_vocab_size;
  j["layer_norm_eps"] = c.layer_norm_eps;
}

void read_bert_style(const json& j, EncoderConfig& c, const std::string& source) {
  read_bert_shape(j, c, source);
  c.classifier_dropout = read_double(j, "classifier_dropout", -1.0, source);
  c.position_embedding_type = read_string(j, "position_embedding_type", c.position_embedding_type, source);
  if (c.family == ModelFamily::kElectra) {
    c.embedding_size = read_int(j, "embedding_size", c.embedding_size, source);
    c.summary_last_dropout = read_double(j, "summary_last_dropout", c.summary_last_dropout, source);
  }
}

// The task of config.json's first architecture, when it is one of the task
// classes ("...ForTokenClassification" etc.).
std::optional<Task> task_of_architectures(const json& j) {
  if (!j.contains("architectures") || !j["architectures"].is_array() || j["architectures"].empty() ||
      !j["architectures"][0].is_string())
    return std::nullopt;
  return task_of_class(j["architectures"][0].get<std::string>());
}

// ELECTRA's multiple-choice head is transformers' SequenceSummary with
// ElectraConfig's settings (first token, a projection to hidden_size, GELU,
// the last dropout); other settings would change its shapes or maths.
void check_electra_summary(const json& j, const std::string& source) {
  auto expect = [&](const char* key, const json& wanted) {
    if (j.contains(key) && j[key] != wanted)
      config_key_error(source, key,
                       "is " + clip_for_message(j[key].dump(), 40) + "; ELECTRA's multiple-choice head is built for " +
                           wanted.dump() + " (ElectraConfig's default) only");
  };
  expect("summary_type", "first");
  expect("summary_use_proj", true);
  expect("summary_activation", "gelu");
  if (j.contains("summary_proj_to_labels") && j["summary_proj_to_labels"] == true)
    config_key_error(source, "summary_proj_to_labels",
                     "is true; ELECTRA's multiple-choice head projects to hidden_size (the key unset)");
  if (j.contains("summary_first_dropout") && j["summary_first_dropout"].is_number() &&
      j["summary_first_dropout"].get<double>() > 0)
    config_key_error(source, "summary_first_dropout", "is set; only summary_last_dropout is supported");
}

void read_distilbert(const json& j, EncoderConfig& c, const std::string& source) {
  c.hidden_size = read_int(j, "dim", c.hidden_size, source);
  c.num_hidden_layers = read_int(j, "n_layers", c.num_hidden_layers, source);
  c.num_attention_heads = read_int(j, "n_heads", c.num_attention_heads, source);
  c.intermediate_size = read_int(j, "hidden_dim", c.intermediate_size, source);
  c.hidden_act = read_string(j, "activation", c.hidden_act, source);
  c.hidden_dropout_prob = read_double(j, "dropout", c.hidden_dropout_prob, source);
  c.attention_probs_dropout_prob = read_double(j, "attention_dropout", c.attention_probs_dropout_prob, source);
  c.classifier_dropout = read_double(j, "seq_classif_dropout", c.classifier_dropout, source);
  c.qa_dropout = read_double(j, "qa_dropout", c.qa_dropout, source);
  c.sinusoidal_pos_embds = read_bool(j, "sinusoidal_pos_embds", c.sinusoidal_pos_embds, source);
}

void read_modernbert(const json& j, EncoderConfig& c, const std::string& source) {
  c.hidden_size = read_int(j, "hidden_size", c.hidden_size, source);
  c.num_hidden_layers = read_int(j, "num_hidden_layers", c.num_hidden_layers, source);
  c.num_attention_heads = read_int(j, "num_attention_heads", c.num_attention_heads, source);
  c.intermediate_size = read_int(j, "intermediate_size", c.intermediate_size, source);
  c.hidden_act = read_string(j, "hidden_activation", c.hidden_act, source);
  c.hidden_dropout_prob = read_double(j, "mlp_dropout", c.hidden_dropout_prob, source);
  c.attention_probs_dropout_prob = read_double(j, "attention_dropout", c.attention_probs_dropout_prob, source);
  c.embedding_dropout = read_double(j, "embedding_dropout", c.embedding_dropout, source);
  c.classifier_dropout = read_double(j, "classifier_dropout", c.classifier_dropout, source);
  c.layer_norm_eps = read_double(j, "norm_eps", c.layer_norm_eps, source);
  c.global_attn_every_n_layers = read_int(j, "global_attn_every_n_layers", c.global_attn_every_n_layers, source);
  c.local_attention = read_int(j, "local_attention", c.local_attention, source);
  c.global_rope_theta = read_double(j, "global_rope_theta", c.global_rope_theta, source);
  c.local_rope_theta = read_double(j, "local_rope_theta", c.local_rope_theta, source);
  c.attention_bias = read_bool(j, "attention_bias", c.attention_bias, source);
  c.mlp_bias = read_bool(j, "mlp_bias", c.mlp_bias, source);
  c.norm_bias = read_bool(j, "norm_bias", c.norm_bias, source);
  c.classifier_bias = read_bool(j, "classifier_bias", c.classifier_bias, source);
  c.classifier_pooling = read_string(j, "classifier_pooling", c.classifier_pooling, source);
  c.classifier_activation = read_string(j, "classifier_activation", c.classifier_activation, source);
  c.initializer_cutoff_factor = read_double(j, "initializer_cutoff_factor", c.initializer_cutoff_factor, source);
  c.tie_word_embeddings = read_bool(j, "tie_word_embeddings", c.tie_word_embeddings, source);
  // transformers >= 4.53 may write per-layer-type RoPE parameters and layer
  // types instead of the scalar keys: read them when present.
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    const json& rope = j["rope_parameters"];
    for (const auto& [type, theta] : {std::pair<const char*, double*>{"full_attention", &c.global_rope_theta},
                                      {"sliding_attention", &c.local_rope_theta}})
      if (rope.contains(type) && rope[type].is_object())
        *theta = read_double(rope[type], "rope_theta", *theta, source + " rope_parameters." + type);
  }
}

std::string strip_spaces(const std::string& text) {
  const size_t begin = text.find_first_not_of(" \t\n\r");
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(" \t\n\r") - begin + 1);
}

// DebertaV2Config and the attributes modeling_deberta_v2.py reads with getattr
// defaults (share_att_key, position_buckets, norm_rel_ebd). Keys of parts it
// has that are not implemented here are refused, naming the key.
void read_deberta_v2(const json& j, EncoderConfig& c, const std::string& source) {
  read_bert_shape(j, c, source);
  c.classifier_dropout = read_double(j, "cls_dropout", -1.0, source);
  c.relative_attention = read_bool(j, "relative_attention", c.relative_attention, source);
  c.max_relative_positions = read_int(j, "max_relative_positions", c.max_relative_positions, source);
  c.position_buckets = read_int(j, "position_buckets", c.position_buckets, source);
  c.share_att_key = read_bool(j, "share_att_key", c.share_att_key, source);
  c.norm_rel_ebd = read_string(j, "norm_rel_ebd", c.norm_rel_ebd, source);
  c.position_biased_input = read_bool(j, "position_biased_input", c.position_biased_input, source);
  c.pooler_dropout = read_double(j, "pooler_dropout", c.pooler_dropout, source);
  c.pooler_hidden_act = read_string(j, "pooler_hidden_act", c.pooler_hidden_act, source);
  // pos_att_type: a list, or the older "p2c|c2p" string (DebertaV2Config splits it, lowercased).
  if (j.contains("pos_att_type") && !j["pos_att_type"].is_null()) {
    const json& types = j["pos_att_type"];
    if (types.is_string()) {
      std::string text = types.get<std::string>();
      std::transform(text.begin(), text.end(), text.begin(), [](unsigned char ch) { return std::tolower(ch); });
      std::stringstream parts(text);
      for (std::string part; std::getline(parts, part, '|');) c.pos_att_type.push_back(strip_spaces(part));
    } else if (types.is_array()) {
      for (const json& t : types) {
        if (!t.is_string()) config_key_error(source, "pos_att_type", "must be a list of strings (\"c2p\", \"p2c\")");
        c.pos_att_type.push_back(t.get<std::string>());
      }
    } else {
      config_key_error(source, "pos_att_type", "must be a list such as [\"p2c\", \"c2p\"] or a \"p2c|c2p\" string");
    }
  }
  if (read_int(j, "pooler_hidden_size", c.hidden_size, source) != c.hidden_size)
    config_key_error(source, "pooler_hidden_size",
                     "must equal hidden_size (" + std::to_string(c.hidden_size) +
                         "): the classifier reads the pooler's output as hidden_size wide");
  // Parts of modeling_deberta_v2.py that DeBERTa-v3 checkpoints do not use.
  if (read_int(j, "conv_kernel_size", 0, source) > 0)
    config_key_error(source, "conv_kernel_size",
                     "the convolution after layer 0 (deberta-v2-xlarge / xxlarge) is not supported; DeBERTa-v3 "
                     "checkpoints have none");
  if (read_int(j, "embedding_size", c.hidden_size, source) != c.hidden_size)
    config_key_error(source, "embedding_size", "an embedding width other than hidden_size (embed_proj) is not supported");
  if (read_int(j, "attention_head_size", c.hidden_size / std::max<int64_t>(c.num_attention_heads, 1), source) *
          c.num_attention_heads != c.hidden_size)
    config_key_error(source, "attention_head_size",
                     "a head size other than hidden_size / num_attention_heads is not supported");
}

void check_activation(const std::string& name, const char* key, const std::string& source) {
  const auto& acts = supported_activations();
  if (std::find(acts.begin(), acts.end(), name) != acts.end()) return;
  std::string list;
  for (const auto& a : acts) list += (list.empty() ? "" : ", ") + a;
  config_key_error(source, key, "\"" + clip_for_message(name, 60) + "\" is not supported (supported: " + list + ")");
}

// What DeBERTa's attention can be (modeling_deberta_v2.py).
void validate_deberta_v2(const EncoderConfig& c, const std::string& source) {
  for (const std::string& type : c.pos_att_type)
    if (type != "c2p" && type != "p2c")
      config_key_error(source, "pos_att_type",
                       "holds \"" + clip_for_message(type, 40) + "\"; DeBERTa-v2 has the terms \"c2p\" and \"p2c\"");
  check_activation(c.pooler_hidden_act, "pooler_hidden_act", source);
  if (!(c.pooler_dropout >= 0.0 && c.pooler_dropout < 1.0))
    config_key_error(source, "pooler_dropout", "must be in [0, 1), got " + shortest_text(c.pooler_dropout));
  // make_log_bucket_position keeps distances below mid = position_buckets // 2
  // and divides by mid and by log((max_relative_positions - 1) / mid): 1 (mid
  // 0) makes NaN buckets, and the first step failed with an index error.
  // 2 and 3 (mid 1) are the smallest that work: buckets -1, 0, 1.
  if (c.position_buckets == 0 || c.position_buckets == 1 || c.position_buckets < -1)
    config_key_error(source, "position_buckets",
                     "must be -1 (no buckets) or at least 2 (transformers' make_log_bucket_position divides by "
                     "position_buckets // 2), got " + std::to_string(c.position_buckets));
  if (!c.relative_attention) {
    // HF would create encoder.LayerNorm and never use it: a parameter without gradients.
    if (c.norm_relative_embeddings())
      config_key_error(source, "norm_rel_ebd", "is \"layer_norm\" but relative_attention is false (nothing to normalise)");
    return;
  }
  if (c.pos_att_type.empty())
    config_key_error(source, "pos_att_type",
                     "is empty but relative_attention is true: rel_embeddings would be unused (give [\"p2c\", \"c2p\"])");
  // make_log_bucket_position divides by log((max_relative_positions - 1) / (position_buckets / 2)).
  if (c.position_buckets > 0 && c.relative_positions_limit() - 1 <= c.position_buckets / 2)
    config_key_error(source, "position_buckets",
                     std::to_string(c.position_buckets) + " needs max_relative_positions (or max_position_embeddings) above " +
                         std::to_string(c.position_buckets / 2 + 1) + ", got " +
                         std::to_string(c.relative_positions_limit()));
}

}  // namespace

const char* family_name(ModelFamily family) {
  switch (family) {
    case ModelFamily::kBert: return "bert";
    case ModelFamily::kRoberta: return "roberta";
    case ModelFamily::kDistilBert: return "distilbert";
    case ModelFamily::kElectra: return "electra";
    case ModelFamily::kModernBert: return "modernbert";
    case ModelFamily::kDebertaV2: return "deberta-v2";
  }
  return "?";
}

EncoderConfig EncoderConfig::from_json(const std::string& text, const std::string& source) {
  const json j = parse_user_json(text, source);  // depth and duplicate keys: core/json_read.h
  if (!j.is_object()) throw Error(source + ": expected a JSON object");

  const std::string model_type = read_string(j, "model_type", "bert", source);
  const FamilyName* found = nullptr;
  for (const auto& entry : kModelTypes)
    if (model_type == entry.model_type) found = &entry;
  if (!found) {
    std::string list;
    for (const auto& entry : kModelTypes) list += std::string(list.empty() ? "" : ", ") + entry.model_type;
    config_key_error(source, "model_type",
                     "is \"" + clip_for_message(model_type, 60) + "\"; shardtrain trains " + list);
  }
  for (const char* key : {"is_decoder", "add_cross_attention"})
    if (j.contains(key) && j[key].is_boolean() && j[key].get<bool>())
      config_key_error(source, key, "is true; only encoder-only models are supported");

  EncoderConfig c = family_defaults(found->family, model_type);
  c.vocab_size = read_int(j, "vocab_size", c.vocab_size, source);
  c.max_position_embeddings = read_int(j, "max_position_embeddings", c.max_position_embeddings, source);
  c.initializer_range = read_double(j, "initializer_range", c.initializer_range, source);
  c.pad_token_id = read_int(j, "pad_token_id", c.pad_token_id, source);
  c.problem_type = read_string(j, "problem_type", "", source);
  switch (c.family) {
    case ModelFamily::kDistilBert: read_distilbert(j, c, source); break;
    case ModelFamily::kModernBert: read_modernbert(j, c, source); break;
    case ModelFamily::kDebertaV2: read_deberta_v2(j, c, source); break;
    default: read_bert_style(j, c, source); break;
  }

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

  if (const std::optional<Task> task = task_of_architectures(j)) {
    c.task = *task;
    c.has_task_head = true;
  }
  if (c.family == ModelFamily::kElectra) check_electra_summary(j, source);

  const std::set<std::string> modelled = modelled_keys(c.family);
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
  const bool distil = family == ModelFamily::kDistilBert, modern = family == ModelFamily::kModernBert;
  const bool deberta = family == ModelFamily::kDebertaV2;
  // Errors name the key as this family's config.json spells it.
  const char* hidden_key = distil ? "dim" : "hidden_size";
  const char* layers_key = distil ? "n_layers" : "num_hidden_layers";
  const char* heads_key = distil ? "n_heads" : "num_attention_heads";
  const char* inner_key = distil ? "hidden_dim" : "intermediate_size";
  auto positive = [&](const char* key, int64_t value) {
    if (value <= 0) config_key_error(source, key, "must be positive, got " + std::to_string(value));
  };
  positive("vocab_size", vocab_size);
  positive(hidden_key, hidden_size);
  positive(layers_key, num_hidden_layers);
  positive(heads_key, num_attention_heads);
  positive(inner_key, intermediate_size);
  positive("max_position_embeddings", max_position_embeddings);
  positive("num_labels", num_labels);
  if (family == ModelFamily::kElectra) positive("embedding_size", embedding_size);
  if (distil || modern) {
    if (type_vocab_size != 0) config_key_error(source, "type_vocab_size", "this family has no token types");
  } else if (deberta) {
    if (type_vocab_size < 0) config_key_error(source, "type_vocab_size", "must be >= 0 (0: no token types)");
  } else {
    positive("type_vocab_size", type_vocab_size);
  }
  // Token ids are int32 in the tokenized data and the collated batches.
  if (vocab_size > std::numeric_limits<int32_t>::max())
    config_key_error(source, "vocab_size",
                     std::to_string(vocab_size) + " is more than " +
                         std::to_string(std::numeric_limits<int32_t>::max()) + " (token ids are 32-bit)");
  if (num_labels > kMaxNumLabels)
    config_key_error(source, "num_labels",
                     std::to_string(num_labels) + " is more than " + std::to_string(kMaxNumLabels) + " labels");
  {
    // In doubles, so that no product overflows before the check.
    const double D = static_cast<double>(hidden_size), I = static_cast<double>(intermediate_size);
    const double E = static_cast<double>(embedding_width());
    const double parameters =
        (static_cast<double>(vocab_size) + static_cast<double>(max_position_embeddings) +
         static_cast<double>(type_vocab_size)) * E + E * D +
        static_cast<double>(num_hidden_layers) * ((deberta ? 6 : 4) * D * D + 3 * D * I) +
        D * static_cast<double>(num_labels) + (deberta ? 2.0 * static_cast<double>(relative_span()) * D : 0.0);
    if (parameters > std::ldexp(1.0, 50))
      config_key_error(source, hidden_key,
                       str_format("this config makes a model of about %.3g parameters (vocab_size %lld, hidden size "
                                  "%lld, %lld layers, intermediate size %lld): no machine holds it",
                                  parameters, static_cast<long long>(vocab_size), static_cast<long long>(hidden_size),
                                  static_cast<long long>(num_hidden_layers),
                                  static_cast<long long>(intermediate_size)));
  }
  if (hidden_size % num_attention_heads != 0)
    config_key_error(source, hidden_key,
                     std::to_string(hidden_size) + " is not a multiple of " + heads_key + " (" +
                         std::to_string(num_attention_heads) + ")");
  if (modern && head_dim() % 2 != 0)
    config_key_error(source, "hidden_size",
                     "the head size hidden_size / num_attention_heads = " + std::to_string(head_dim()) +
                         " must be even for rotary position embeddings");
  auto probability = [&](const char* key, double p) {
    if (!(p >= 0.0 && p < 1.0)) config_key_error(source, key, "must be in [0, 1), got " + shortest_text(p));
  };
  probability(distil ? "dropout" : modern ? "mlp_dropout" : "hidden_dropout_prob", hidden_dropout_prob);
  probability(distil || modern ? "attention_dropout" : "attention_probs_dropout_prob", attention_probs_dropout_prob);
  if (classifier_dropout >= 0) probability(distil ? "seq_classif_dropout" : "classifier_dropout", classifier_dropout);
  if (modern) probability("embedding_dropout", embedding_dropout);
  if (distil) probability("qa_dropout", qa_dropout);
  if (family == ModelFamily::kElectra) probability("summary_last_dropout", summary_last_dropout);
  if (!(initializer_range >= 0.0)) config_key_error(source, "initializer_range", "must be >= 0");
  if (!(layer_norm_eps > 0.0)) config_key_error(source, modern ? "norm_eps" : "layer_norm_eps", "must be > 0");
  if (pad_token_id < 0 || pad_token_id >= vocab_size)
    config_key_error(source, "pad_token_id",
                     std::to_string(pad_token_id) + " is outside the vocabulary [0, " + std::to_string(vocab_size) +
                         ")");
  if (family == ModelFamily::kRoberta && max_position_embeddings <= pad_token_id + 1)
    config_key_error(source, "max_position_embeddings",
                     "RoBERTa positions start after pad_token_id (" + std::to_string(pad_token_id) +
                         "), so max_position_embeddings must exceed pad_token_id + 1");
  if (!distil && !modern && !deberta && position_embedding_type != "absolute")
    config_key_error(source, "position_embedding_type",
                     "\"" + clip_for_message(position_embedding_type, 60) +
                         "\" is not supported; only \"absolute\" is implemented");
  check_activation(hidden_act, distil ? "activation" : modern ? "hidden_activation" : "hidden_act", source);
  if (modern) {
    check_activation(classifier_activation, "classifier_activation", source);
    positive("global_attn_every_n_layers", global_attn_every_n_layers);
    positive("local_attention", local_attention);
    if (local_attention % 2 != 0)
      config_key_error(source, "local_attention", "must be even (the window is local_attention / 2 on each side)");
    if (!(global_rope_theta > 0)) config_key_error(source, "global_rope_theta", "must be > 0");
    if (!(local_rope_theta > 0)) config_key_error(source, "local_rope_theta", "must be > 0");
    if (classifier_pooling != "cls" && classifier_pooling != "mean")
      config_key_error(source, "classifier_pooling",
                       "\"" + clip_for_message(classifier_pooling, 40) + "\" is not \"cls\" or \"mean\"");
    if (!(initializer_cutoff_factor > 0)) config_key_error(source, "initializer_cutoff_factor", "must be > 0");
  }
  if (deberta) validate_deberta_v2(*this, source);
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
  const char* suffix = task_rules(task).class_suffix();
  std::string base;
  switch (family) {
    case ModelFamily::kBert: base = "Bert"; break;
    case ModelFamily::kRoberta:
      base = model_type == "xlm-roberta" ? "XLMRoberta" : model_type == "camembert" ? "Camembert" : "Roberta";
      break;
    case ModelFamily::kDistilBert: base = "DistilBert"; break;
    case ModelFamily::kElectra: base = "Electra"; break;
    case ModelFamily::kModernBert: base = "ModernBert"; break;
    case ModelFamily::kDebertaV2: base = "DebertaV2"; break;
  }
  return base + suffix;
}

std::string EncoderConfig::base_prefix() const {
  switch (family) {
    case ModelFamily::kModernBert: return "model.";
    case ModelFamily::kDebertaV2: return "deberta.";
    default: return std::string(family_name(family)) + ".";
  }
}

bool EncoderConfig::has_position_term(const std::string& type) const {
  return std::find(pos_att_type.begin(), pos_att_type.end(), type) != pos_att_type.end();
}

bool EncoderConfig::norm_relative_embeddings() const {
  // modeling_deberta_v2.py: [x.strip() for x in norm_rel_ebd.lower().split("|")]
  std::string text = norm_rel_ebd;
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char ch) { return std::tolower(ch); });
  std::stringstream parts(text);
  for (std::string part; std::getline(parts, part, '|');)
    if (strip_spaces(part) == "layer_norm") return true;
  return false;
}

bool EncoderConfig::is_global_layer(int64_t i) const {
  return family != ModelFamily::kModernBert || i % global_attn_every_n_layers == 0;
}

std::string EncoderConfig::to_json() const {
  json j = json::parse(extra_json.empty() ? "{}" : extra_json);
  j["architectures"] = {architecture()};
  j["model_type"] = model_type;
  j["vocab_size"] = vocab_size;
  j["max_position_embeddings"] = max_position_embeddings;
  j["initializer_range"] = initializer_range;
  j["pad_token_id"] = pad_token_id;
  const json classifier_p = classifier_dropout >= 0 ? json(classifier_dropout) : json(nullptr);
  switch (family) {
    case ModelFamily::kDistilBert:
      j["dim"] = hidden_size;
      j["n_layers"] = num_hidden_layers;
      j["n_heads"] = num_attention_heads;
      j["hidden_dim"] = intermediate_size;
      j["activation"] = hidden_act;
      j["dropout"] = hidden_dropout_prob;
      j["attention_dropout"] = attention_probs_dropout_prob;
      j["seq_classif_dropout"] = effective_classifier_dropout();
      j["qa_dropout"] = qa_dropout;
      j["sinusoidal_pos_embds"] = sinusoidal_pos_embds;
      break;
    case ModelFamily::kModernBert:
      j["hidden_size"] = hidden_size;
      j["num_hidden_layers"] = num_hidden_layers;
      j["num_attention_heads"] = num_attention_heads;
      j["intermediate_size"] = intermediate_size;
      j["hidden_activation"] = hidden_act;
      j["mlp_dropout"] = hidden_dropout_prob;
      j["attention_dropout"] = attention_probs_dropout_prob;
      j["embedding_dropout"] = embedding_dropout;
      j["classifier_dropout"] = effective_classifier_dropout();
      j["norm_eps"] = layer_norm_eps;
      j["global_attn_every_n_layers"] = global_attn_every_n_layers;
      j["local_attention"] = local_attention;
      j["global_rope_theta"] = global_rope_theta;
      j["local_rope_theta"] = local_rope_theta;
      j["attention_bias"] = attention_bias;
      j["mlp_bias"] = mlp_bias;
      j["norm_bias"] = norm_bias;
      j["classifier_bias"] = classifier_bias;
      j["classifier_pooling"] = classifier_pooling;
      j["classifier_activation"] = classifier_activation;
      j["initializer_cutoff_factor"] = initializer_cutoff_factor;
      j["tie_word_embeddings"] = tie_word_embeddings;
      break;
    case ModelFamily::kDebertaV2:
      write_bert_shape(*this, j);
      if (classifier_dropout >= 0) j["cls_dropout"] = classifier_dropout;
      j["relative_attention"] = relative_attention;
      j["max_relative_positions"] = max_relative_positions;
      j["position_buckets"] = position_buckets;
      j["pos_att_type"] = pos_att_type;
      j["share_att_key"] = share_att_key;
      j["norm_rel_ebd"] = norm_rel_ebd;
      j["position_biased_input"] = position_biased_input;
      j["pooler_dropout"] = pooler_dropout;
      j["pooler_hidden_act"] = pooler_hidden_act;
      j["pooler_hidden_size"] = hidden_size;
      break;
    default:
      write_bert_shape(*this, j);
      j["classifier_dropout"] = classifier_p;
      j["position_embedding_type"] = position_embedding_type;
      if (family == ModelFamily::kElectra) {
        j["embedding_size"] = embedding_size;
        j["summary_last_dropout"] = summary_last_dropout;
      }
      break;
  }
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
