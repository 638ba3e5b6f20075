// Shapes: B batch, L sequence length, D hidden size, H attention heads,
// Dh = D / H head size, I intermediate size, C labels, V vocabulary,
// P max positions; packed batches: T real tokens, Lmax the longest sequence.
#include "shardtrain/model/bert.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/nn/modules/container/modulelist.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <fstream>
#include <set>
#include <sstream>

#include "model/attention.h"
#include "model/low_precision.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/memory.h"
#include "shardtrain/model/activation_checkpoint.h"
#include "shardtrain/model/dropout.h"

namespace shardtrain {
namespace {

using json = nlohmann::json;

const std::vector<std::string>& supported_activations() {
  static const std::vector<std::string> names = {
      "gelu",   "gelu_python", "gelu_new", "gelu_pytorch_tanh", "gelu_accurate", "gelu_fast", "quick_gelu",
      "gelu_10", "relu",       "relu2",    "relu6",             "leaky_relu",    "silu",      "swish",
      "mish",   "tanh",        "sigmoid",  "linear",            "laplace"};
  return names;
}

// --- config.json reading: every accessor names the key and the file --------

[[noreturn]] void config_error(const std::string& source, const std::string& key, const std::string& problem) {
  throw Error(source + ": key \"" + key + "\": " + problem);
}

int64_t read_int(const json& j, const char* key, int64_t fallback, const std::string& source) {
  if (!j.contains(key)) return fallback;
  const json& v = j[key];
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() && std::fabs(v.get<double>()) < 1e15)
    return static_cast<int64_t>(v.get<double>());
  config_error(source, key, "expected an integer, got " + v.dump());
}

double read_double(const json& j, const char* key, double fallback, const std::string& source) {
  if (!j.contains(key)) return fallback;
  const json& v = j[key];
  if (v.is_number()) return v.get<double>();
  config_error(source, key, "expected a number, got " + v.dump());
}

std::string read_string(const json& j, const char* key, const std::string& fallback, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  const json& v = j[key];
  if (v.is_string()) return v.get<std::string>();
  config_error(source, key, "expected a string, got " + v.dump());
}

std::vector<std::string> read_id2label(const json& j, const std::string& source) {
  const json& v = j["id2label"];
  if (!v.is_object()) config_error(source, "id2label", "expected an object {\"0\": \"name\", ...}");
  std::vector<std::string> names(v.size());
  std::vector<bool> seen(v.size(), false);
  for (const auto& item : v.items()) {
    std::size_t id = 0;
    std::size_t used = 0;
    try {
      id = std::stoul(item.key(), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.key().size() || id >= names.size() || seen[id])
      config_error(source, "id2label", "keys must be the ids 0.." + std::to_string(names.size() - 1) +
                                           " each once; got \"" + item.key() + "\"");
    if (!item.value().is_string()) config_error(source, "id2label", "label names must be strings");
    names[id] = item.value().get<std::string>();
    seen[id] = true;
  }
  return names;
}

c10::Scalar lowest_value(at::ScalarType type) {
  switch (type) {
    case at::kDouble: return std::numeric_limits<double>::lowest();
    case at::kHalf: return -65504.0;
    case at::kBFloat16: return -3.3895313892515355e38;
    default: return std::numeric_limits<float>::lowest();
  }
}

// HF's extended attention mask of a [B, L] keep mask (1 attended, 0 padding):
// [B, 1, 1, L], 0 where attended and finfo(dtype).min at padding.
at::Tensor extended_attention_mask(const at::Tensor& keep, at::ScalarType dtype) {
  return (1.0 - keep.to(dtype)).mul_(lowest_value(dtype)).view({keep.size(0), 1, 1, keep.size(1)});
}

void check_sequence_length(int64_t length, const BertConfig& config) {
  if (length > config.max_position_embeddings)
    throw Error("sequence length " + std::to_string(length) + " exceeds max_position_embeddings (" +
                std::to_string(config.max_position_embeddings) + "); lower data.max_length");
}

// splitmix64: spreads (seed, name) into independent generator seeds.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t name_hash(const std::string& name) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ULL;
  return h;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

using detail::is_16bit;

// LayerNorm in float32 for 16-bit activations (and parameters), cast back, as
// torch.autocast runs layer_norm (docs/DESIGN.md, "Mixed precision").
at::Tensor norm(torch::nn::LayerNorm& layer_norm, const at::Tensor& x) {
  if (!is_16bit(x.scalar_type())) return layer_norm(x);
  const auto& o = layer_norm->options;
  return at::layer_norm(x.to(at::kFloat), o.normalized_shape(), layer_norm->weight.to(at::kFloat),
                        layer_norm->bias.to(at::kFloat), o.eps())
      .to(x.scalar_type());
}

at::Tensor maybe_dropout(const at::Tensor& x, double p, bool training) { return shardtrain::dropout(x, p, training); }

// The word-embedding lookup with the gradient bert.h describes. The weight is
// kept in saved_data, not save_for_backward: backward reads only its .grad
// (which a sharded strategy attaches just before this unit's backward), never
// its values, so an in-place update or a freed gathered copy must not trip
// autograd's version check.
struct WordLookup : public torch::autograd::Function<WordLookup> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& weight, const at::Tensor& ids,
                            int64_t padding_idx) {
    ctx->saved_data["weight"] = weight;
    ctx->saved_data["ids"] = ids;
    ctx->saved_data["num_words"] = weight.size(0);
    ctx->saved_data["padding_idx"] = padding_idx;
    return at::embedding(weight, ids, padding_idx);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const at::Tensor weight = ctx->saved_data["weight"].toTensor();
    const at::Tensor& existing = weight.grad();
    // With create_graph autograd adds out of place; keep the plain dense form there.
    const bool sparse = existing.defined() && existing.layout() == at::kStrided && !at::GradMode::is_enabled();
    at::Tensor grad = at::embedding_backward(grad_outputs[0], ctx->saved_data["ids"].toTensor(),
                                             ctx->saved_data["num_words"].toInt(),
                                             ctx->saved_data["padding_idx"].toInt(), false, sparse);
    return {grad, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

// ============================== BertConfig ===================================

BertConfig BertConfig::from_json(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(source + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw Error(source + ": expected a JSON object");

  const std::string model_type = read_string(j, "model_type", "bert", source);
  if (model_type != "bert")
    config_error(source, "model_type", "is \"" + model_type + "\"; shardtrain implements only \"bert\"");
  for (const char* key : {"is_decoder", "add_cross_attention"})
    if (j.contains(key) && j[key].is_boolean() && j[key].get<bool>())
      config_error(source, key, "is true; only encoder-only BERT is supported");

  BertConfig c;
  c.vocab_size = read_int(j, "vocab_size", c.vocab_size, source);
  c.hidden_size = read_int(j, "hidden_size", c.hidden_size, source);
  c.num_hidden_layers = read_int(j, "num_hidden_layers", c.num_hidden_layers, source);
  c.num_attention_heads = read_int(j, "num_attention_heads", c.num_attention_heads, source);
  c.intermediate_size = read_int(j, "intermediate_size", c.intermediate_size, source);
  c.hidden_act = read_string(j, "hidden_act", c.hidden_act, source);
  c.hidden_dropout_prob = read_double(j, "hidden_dropout_prob", c.hidden_dropout_prob, source);
  c.attention_probs_dropout_prob =
      read_double(j, "attention_probs_dropout_prob", c.attention_probs_dropout_prob, source);
  if (j.contains("classifier_dropout") && !j["classifier_dropout"].is_null())
    c.classifier_dropout = read_double(j, "classifier_dropout", -1.0, source);
  c.max_position_embeddings = read_int(j, "max_position_embeddings", c.max_position_embeddings, source);
  c.type_vocab_size = read_int(j, "type_vocab_size", c.type_vocab_size, source);
  c.initializer_range = read_double(j, "initializer_range", c.initializer_range, source);
  c.layer_norm_eps = read_double(j, "layer_norm_eps", c.layer_norm_eps, source);
  if (j.contains("pad_token_id") && !j["pad_token_id"].is_null())
    c.pad_token_id = read_int(j, "pad_token_id", c.pad_token_id, source);
  c.position_embedding_type = read_string(j, "position_embedding_type", c.position_embedding_type, source);
  c.problem_type = read_string(j, "problem_type", "", source);

  if (j.contains("id2label")) {
    c.id2label = read_id2label(j, source);
    c.num_labels = static_cast<int64_t>(c.id2label.size());
    if (j.contains("num_labels") && read_int(j, "num_labels", 0, source) != c.num_labels)
      config_error(source, "num_labels", "is " + j["num_labels"].dump() + " but id2label has " +
                                             std::to_string(c.num_labels) + " entries");
  } else {
    const int64_t n = read_int(j, "num_labels", 2, source);
    if (n > kMaxNumLabels)
      config_error(source, "num_labels", std::to_string(n) + " is more than " + std::to_string(kMaxNumLabels) + " labels");
    c.set_num_labels(n);
  }

  static const std::set<std::string> modelled = {
      "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
      "hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout", "max_position_embeddings",
      "type_vocab_size", "initializer_range", "layer_norm_eps", "pad_token_id", "position_embedding_type",
      "problem_type", "id2label", "label2id", "num_labels", "model_type", "architectures"};
  json extra = json::object();
  for (const auto& item : j.items())
    if (!modelled.count(item.key())) extra[item.key()] = item.value();
  c.extra_json = extra.dump();

  c.validate(source);
  return c;
}

BertConfig BertConfig::from_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open model config");
  std::stringstream text;
  text << in.rdbuf();
  return from_json(text.str(), path);
}

void BertConfig::set_num_labels(int64_t n) {
  // Checked here, not only in validate(): the names are allocated right below.
  if (n > kMaxNumLabels)
    throw Error("num_labels = " + std::to_string(n) + " is more than the " + std::to_string(kMaxNumLabels) +
                " labels a classifier may have");
  num_labels = n;
  id2label.clear();
  for (int64_t i = 0; i < std::max<int64_t>(n, 0); ++i) id2label.push_back("LABEL_" + std::to_string(i));
}

void BertConfig::validate(const std::string& source) const {
  auto positive = [&](const char* key, int64_t value) {
    if (value <= 0) config_error(source, key, "must be positive, got " + std::to_string(value));
  };
  positive("vocab_size", vocab_size);
  positive("hidden_size", hidden_size);
  positive("num_hidden_layers", num_hidden_layers);
  positive("num_attention_heads", num_attention_heads);
  positive("intermediate_size", intermediate_size);
  positive("max_position_embeddings", max_position_embeddings);
  positive("type_vocab_size", type_vocab_size);
  positive("num_labels", num_labels);
  // Token ids are int32 in the tokenized data and the collated batches.
  if (vocab_size > std::numeric_limits<int32_t>::max())
    config_error(source, "vocab_size", std::to_string(vocab_size) + " is more than " +
                                           std::to_string(std::numeric_limits<int32_t>::max()) +
                                           " (token ids are 32-bit)");
  if (num_labels > kMaxNumLabels)
    config_error(source, "num_labels", std::to_string(num_labels) + " is more than " +
                                           std::to_string(kMaxNumLabels) + " labels");
  {
    // In doubles, so that no product overflows before the check.
    const double D = static_cast<double>(hidden_size), I = static_cast<double>(intermediate_size);
    const double parameters =
        (static_cast<double>(vocab_size) + static_cast<double>(max_position_embeddings) +
         static_cast<double>(type_vocab_size)) * D +
        static_cast<double>(num_hidden_layers) * (4 * D * D + 2 * D * I) + D * static_cast<double>(num_labels);
    if (parameters > std::ldexp(1.0, 50))
      config_error(source, "hidden_size",
                   str_format("this config makes a model of about %.3g parameters (vocab_size %lld, hidden_size "
                              "%lld, %lld layers, intermediate_size %lld): no machine holds it",
                              parameters, static_cast<long long>(vocab_size), static_cast<long long>(hidden_size),
                              static_cast<long long>(num_hidden_layers), static_cast<long long>(intermediate_size)));
  }
  if (hidden_size % num_attention_heads != 0)
    config_error(source, "hidden_size", std::to_string(hidden_size) + " is not a multiple of num_attention_heads (" +
                                            std::to_string(num_attention_heads) + ")");
  auto probability = [&](const char* key, double p) {
    if (!(p >= 0.0 && p < 1.0)) config_error(source, key, "must be in [0, 1), got " + std::to_string(p));
  };
  probability("hidden_dropout_prob", hidden_dropout_prob);
  probability("attention_probs_dropout_prob", attention_probs_dropout_prob);
  if (classifier_dropout >= 0) probability("classifier_dropout", classifier_dropout);
  if (!(initializer_range >= 0.0)) config_error(source, "initializer_range", "must be >= 0");
  if (!(layer_norm_eps > 0.0)) config_error(source, "layer_norm_eps", "must be > 0");
  if (pad_token_id < 0 || pad_token_id >= vocab_size)
    config_error(source, "pad_token_id", std::to_string(pad_token_id) + " is outside the vocabulary [0, " +
                                             std::to_string(vocab_size) + ")");
  if (position_embedding_type != "absolute")
    config_error(source, "position_embedding_type",
                 "\"" + position_embedding_type + "\" is not supported; only \"absolute\" is implemented");
  const auto& acts = supported_activations();
  if (std::find(acts.begin(), acts.end(), hidden_act) == acts.end()) {
    std::string list;
    for (const auto& a : acts) list += (list.empty() ? "" : ", ") + a;
    config_error(source, "hidden_act", "\"" + hidden_act + "\" is not supported (supported: " + list + ")");
  }
  if (!problem_type.empty() && problem_type != "regression" && problem_type != "single_label_classification" &&
      problem_type != "multi_label_classification")
    config_error(source, "problem_type",
                 "\"" + problem_type +
                     "\" is not one of regression, single_label_classification, multi_label_classification");
  if (problem_type == "regression" && num_labels != 1)
    config_error(source, "problem_type", "regression needs num_labels == 1, got " + std::to_string(num_labels));
  if (static_cast<int64_t>(id2label.size()) != num_labels)
    config_error(source, "id2label", "has " + std::to_string(id2label.size()) + " entries but num_labels is " +
                                         std::to_string(num_labels));
  std::set<std::string> names(id2label.begin(), id2label.end());
  if (names.size() != id2label.size()) config_error(source, "id2label", "label names must be distinct");
}

std::string BertConfig::to_json() const {
  json j = json::parse(extra_json.empty() ? "{}" : extra_json);
  j["architectures"] = {"BertForSequenceClassification"};
  j["model_type"] = "bert";
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["intermediate_size"] = intermediate_size;
  j["hidden_act"] = hidden_act;
  j["hidden_dropout_prob"] = hidden_dropout_prob;
  j["attention_probs_dropout_prob"] = attention_probs_dropout_prob;
  j["classifier_dropout"] = classifier_dropout >= 0 ? json(classifier_dropout) : json(nullptr);
  j["max_position_embeddings"] = max_position_embeddings;
  j["type_vocab_size"] = type_vocab_size;
  j["initializer_range"] = initializer_range;
  j["layer_norm_eps"] = layer_norm_eps;
  j["pad_token_id"] = pad_token_id;
  j["position_embedding_type"] = position_embedding_type;
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

int64_t BertConfig::num_parameters() const {
  const int64_t D = hidden_size, I = intermediate_size, C = num_labels;
  const int64_t embeddings = (vocab_size + max_position_embeddings + type_vocab_size) * D + 2 * D;
  const int64_t layer = 4 * (D * D + D) + 2 * (2 * D) + (D * I + I) + (I * D + D);
  const int64_t pooler = D * D + D;
  const int64_t classifier = D * C + C;
  return embeddings + num_hidden_layers * layer + pooler + classifier;
}

BertConfig bert_base_cased_config(int64_t num_labels) {
  BertConfig c;
  c.vocab_size = 28996;
  c.set_num_labels(num_labels);
  c.extra_json = R"({"gradient_checkpointing": false, "use_cache": true})";
  return c;
}

// ============================== activations ==================================

at::Tensor apply_activation(const std::string& name, const at::Tensor& x) {
  if (name == "gelu" || name == "gelu_python") return at::gelu(x);
  if (name == "gelu_pytorch_tanh") return at::gelu(x, "tanh");
  if (name == "gelu_new" || name == "gelu_accurate") {
    const double k = std::sqrt(2.0 / 3.14159265358979323846);
    return 0.5 * x * (1.0 + at::tanh(k * (x + 0.044715 * at::pow(x, 3.0))));
  }
  if (name == "gelu_fast") return 0.5 * x * (1.0 + at::tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x)));
  if (name == "quick_gelu") return x * at::sigmoid(1.702 * x);
  if (name == "gelu_10") return at::clamp(at::gelu(x), -10.0, 10.0);
  if (name == "relu") return at::relu(x);
  if (name == "relu2") return at::square(at::relu(x));
  if (name == "relu6") return at::hardtanh(x, 0.0, 6.0);
  if (name == "leaky_relu") return at::leaky_relu(x, 0.01);
  if (name == "silu" || name == "swish") return at::silu(x);
  if (name == "mish") return at::mish(x);
  if (name == "tanh") return at::tanh(x);
  if (name == "sigmoid") return at::sigmoid(x);
  if (name == "linear") return x;
  if (name == "laplace") return 0.5 * (1.0 + at::erf((x - 0.707107) / (0.282095 * std::sqrt(2.0))));
  throw Error("unsupported activation \"" + name + "\" (config key hidden_act)");
}

// ============================== modules ======================================

BertEmbeddings::BertEmbeddings(const BertConfig& c)
    : pad_token_id_(c.pad_token_id), dropout_p_(c.hidden_dropout_prob) {
  // padding_idx matters beyond init: autograd leaves the padding row's gradient
  // zero, as in HF.
  word_embeddings = register_module(
      "word_embeddings",
      torch::nn::Embedding(torch::nn::EmbeddingOptions(c.vocab_size, c.hidden_size).padding_idx(c.pad_token_id)));
  position_embeddings =
      register_module("position_embeddings", torch::nn::Embedding(c.max_position_embeddings, c.hidden_size));
  token_type_embeddings =
      register_module("token_type_embeddings", torch::nn::Embedding(c.type_vocab_size, c.hidden_size));
  layer_norm = register_module(
      "LayerNorm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.hidden_size}).eps(c.layer_norm_eps)));
}

at::Tensor BertEmbeddings::combine(const at::Tensor& input_ids, const at::Tensor& token_type_ids,
                                   const at::Tensor& position_ids) {
  at::Tensor words = WordLookup::apply(word_embeddings->weight, input_ids, pad_token_id_);
  at::Tensor x = words + token_type_embeddings(token_type_ids);  // [B, L, D] or [T, D]
  x = x + position_embeddings(position_ids);                     // [L, D] broadcast, or [T, D]
  return maybe_dropout(norm(layer_norm, x), dropout_p_, is_training());
}

at::Tensor BertEmbeddings::forward(const at::Tensor& input_ids, const at::Tensor& token_type_ids) {
  const int64_t L = input_ids.size(1);
  return combine(input_ids, token_type_ids, at::arange(L, input_ids.options().dtype(at::kLong)));
}

at::Tensor BertEmbeddings::forward_packed(const at::Tensor& input_ids, const at::Tensor& token_type_ids,
                                          const at::Tensor& position_ids) {
  return combine(input_ids, token_type_ids, position_ids);
}

PackedLayout PackedLayout::from_cu_seqlens(const at::Tensor& cu_seqlens, int64_t max_seqlen, at::ScalarType dtype,
                                           const at::Device& device) {
  if (!cu_seqlens.defined() || cu_seqlens.dim() != 1 || cu_seqlens.size(0) < 2)
    throw Error("forward_packed: cu_seqlens must be [B+1] with B >= 1");
  if (max_seqlen < 1) throw Error("forward_packed: max_seqlen must be >= 1, got " + std::to_string(max_seqlen));
  const at::Tensor cu = cu_seqlens.to(at::kCPU, at::kLong).contiguous();
  const int64_t* bounds = cu.data_ptr<int64_t>();
  const int64_t B = cu.size(0) - 1, T = bounds[B];
  if (bounds[0] != 0) throw Error("forward_packed: cu_seqlens must start at 0");
  // Every length checked before anything is sized from the bounds.
  for (int64_t b = 0; b < B; ++b) {
    const int64_t length = bounds[b + 1] - bounds[b];
    if (length < 1 || length > max_seqlen)
      throw Error(str_format("forward_packed: sequence %lld has %lld tokens (cu_seqlens %lld..%lld); each needs "
                             "1..max_seqlen (%lld)",
                             static_cast<long long>(b), static_cast<long long>(length),
                             static_cast<long long>(bounds[b]), static_cast<long long>(bounds[b + 1]),
                             static_cast<long long>(max_seqlen)));
  }
  PackedLayout layout;
  layout.num_sequences = B;
  layout.max_seqlen = max_seqlen;
  // Built on the host: B and T are small, and the layers reuse it all.
  at::Tensor rows = at::empty({T}, at::kLong);
  at::Tensor first = at::empty({B}, at::kLong);
  at::Tensor keep = at::zeros({B, max_seqlen}, at::kFloat);
  int64_t* row = rows.data_ptr<int64_t>();
  float* kept = keep.data_ptr<float>();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t length = bounds[b + 1] - bounds[b];
    first.data_ptr<int64_t>()[b] = bounds[b];
    for (int64_t p = 0; p < length; ++p) {
      row[bounds[b] + p] = b * max_seqlen + p;
      kept[b * max_seqlen + p] = 1.0f;
    }
  }
  layout.padded_rows = rows.to(device);
  layout.first_tokens = first.to(device);
  // HF's extended mask: (1 - mask) * finfo.min, in the activations' dtype.
  layout.additive_mask = extended_attention_mask(keep, dtype).to(device);
  return layout;
}

BertLayer::BertLayer(const BertConfig& c)
    : num_heads_(c.num_attention_heads),
      activation_(c.hidden_act),
      hidden_dropout_p_(c.hidden_dropout_prob),
      attention_dropout_p_(c.attention_probs_dropout_prob) {
  const int64_t D = c.hidden_size, I = c.intermediate_size;
  auto layer_norm = [&] { return torch::nn::LayerNorm(torch::nn::LayerNormOptions({D}).eps(c.layer_norm_eps)); };
  // Plain modules as folders so named_parameters() spells HF's names.
  auto attention = register_module("attention", std::make_shared<torch::nn::Module>());
  auto self = attention->register_module("self", std::make_shared<torch::nn::Module>());
  query = self->register_module("query", torch::nn::Linear(D, D));
  key = self->register_module("key", torch::nn::Linear(D, D));
  value = self->register_module("value", torch::nn::Linear(D, D));
  auto attention_output = attention->register_module("output", std::make_shared<torch::nn::Module>());
  attention_output_dense = attention_output->register_module("dense", torch::nn::Linear(D, D));
  attention_output_layer_norm = attention_output->register_module("LayerNorm", layer_norm());
  auto intermediate = register_module("intermediate", std::make_shared<torch::nn::Module>());
  intermediate_dense = intermediate->register_module("dense", torch::nn::Linear(D, I));
  auto output = register_module("output", std::make_shared<torch::nn::Module>());
  output_dense = output->register_module("dense", torch::nn::Linear(I, D));
  output_layer_norm = output->register_module("LayerNorm", layer_norm());
}

at::Tensor BertLayer::project_qkv(const at::Tensor& hidden) {
  return at::linear(hidden, at::cat({query->weight, key->weight, value->weight}),
                    at::cat({query->bias, key->bias, value->bias}));
}

at::Tensor BertLayer::attend(const at::Tensor& qkv, const at::Tensor& additive_mask) {
  const int64_t B = qkv.size(0), L = qkv.size(1), D = qkv.size(2) / 3;
  const int64_t H = num_heads_, Dh = D / H;
  const bool training = is_training();
  // view + permute is a stride change, not a copy.
  const at::Tensor heads = qkv.view({B, L, 3, H, Dh}).permute({2, 0, 3, 1, 4});  // [3, B, H, L, Dh]
  const at::Tensor context =
      detail::scaled_dot_attention(heads[0], heads[1], heads[2], additive_mask, attention_dropout_p_, training);
  return context.transpose(1, 2);  // [B, L, H, Dh]
}

at::Tensor BertLayer::finish(const at::Tensor& context, const at::Tensor& hidden) {
  const bool training = is_training();
  at::Tensor attended =
      norm(attention_output_layer_norm, maybe_dropout(attention_output_dense(context), hidden_dropout_p_, training) + hidden);
  at::Tensor inner = apply_activation(activation_, intermediate_dense(attended));  // [..., I]
  return norm(output_layer_norm, maybe_dropout(output_dense(inner), hidden_dropout_p_, training) + attended);
}

at::Tensor BertLayer::forward(const at::Tensor& hidden, const at::Tensor& additive_mask) {
  const int64_t B = hidden.size(0), L = hidden.size(1), D = hidden.size(2);
  // reshape: the one copy, heads back to [B, L, D].
  const at::Tensor context = attend(project_qkv(hidden), additive_mask).reshape({B, L, D});
  return finish(context, hidden);
}

at::Tensor BertLayer::forward_packed(const at::Tensor& hidden, const PackedLayout& layout) {
  const int64_t D = hidden.size(1), B = layout.num_sequences, Lmax = layout.max_seqlen;
  const at::Tensor qkv = project_qkv(hidden);  // [T, 3D]
  // Pad for the attention matmuls only (MosaicBERT's pad_input / unpad_input):
  // padding rows are zero, and the mask gives them zero attention weight.
  const at::Tensor padded = at::zeros({B * Lmax, 3 * D}, qkv.options()).index_copy(0, layout.padded_rows, qkv);
  const at::Tensor context = attend(padded.view({B, Lmax, 3 * D}), layout.additive_mask)
                                 .reshape({B * Lmax, D})
                                 .index_select(0, layout.padded_rows);  // [T, D]
  return finish(context, hidden);
}

BertPooler::BertPooler(const BertConfig& c) {
  dense = register_module("dense", torch::nn::Linear(c.hidden_size, c.hidden_size));
}

at::Tensor BertPooler::forward(const at::Tensor& hidden) { return forward_first_tokens(hidden.select(1, 0)); }

at::Tensor BertPooler::forward_first_tokens(const at::Tensor& first_tokens) { return at::tanh(dense(first_tokens)); }

BertForSequenceClassification::BertForSequenceClassification(const BertConfig& config) : config_(config) {
  config_.validate();
  // Sizes come from files (config.json, a checkpoint's attribute): a model
  // that cannot fit is refused before LibTorch's allocator fails on it.
  require_memory(4.0 * static_cast<double>(config_.num_parameters()),
                 str_format("the model (%lld parameters in fp32: vocab_size %lld, hidden_size %lld, %lld layers, "
                            "intermediate_size %lld, %lld labels)",
                            static_cast<long long>(config_.num_parameters()), static_cast<long long>(config_.vocab_size),
                            static_cast<long long>(config_.hidden_size),
                            static_cast<long long>(config_.num_hidden_layers),
                            static_cast<long long>(config_.intermediate_size),
                            static_cast<long long>(config_.num_labels)),
                 "; use a smaller model config");
  auto bert = register_module("bert", std::make_shared<torch::nn::Module>());
  embeddings_ = bert->register_module("embeddings", std::make_shared<BertEmbeddings>(config_));
  auto encoder = bert->register_module("encoder", std::make_shared<torch::nn::Module>());
  torch::nn::ModuleList layer_list;
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    layers_.push_back(std::make_shared<BertLayer>(config_));
    layer_list->push_back(layers_.back());
  }
  encoder->register_module("layer", layer_list);
  pooler_ = bert->register_module("pooler", std::make_shared<BertPooler>(config_));
  classifier_ = register_module("classifier", torch::nn::Linear(config_.hidden_size, config_.num_labels));
}

at::Tensor BertForSequenceClassification::forward(const at::Tensor& input_ids, const at::Tensor& token_type_ids,
                                                  const at::Tensor& attention_mask) {
  TORCH_CHECK(input_ids.dim() == 2, "input_ids must be [B, L], got ", input_ids.sizes());
  const int64_t B = input_ids.size(0), L = input_ids.size(1);
  check_sequence_length(L, config_);
  at::Tensor types = token_type_ids.defined() ? token_type_ids : at::zeros_like(input_ids);
  TORCH_CHECK(types.sizes() == input_ids.sizes(), "token_type_ids must match input_ids ", input_ids.sizes());

  before(0);
  at::Tensor hidden = after(0, embeddings_->forward(input_ids, types));  // [B, L, D]
  const at::ScalarType dtype = hidden.scalar_type();
  at::Tensor additive_mask;  // [B, 1, 1, L]: 0 where attended, finfo.min at padding (HF's extended mask)
  if (attention_mask.defined()) {
    TORCH_CHECK(attention_mask.sizes() == input_ids.sizes(), "attention_mask must match input_ids ",
                input_ids.sizes());
    additive_mask = extended_attention_mask(attention_mask, dtype);
  } else {
    additive_mask = at::zeros({B, 1, 1, L}, hidden.options());
  }
  for (size_t i = 0; i < layers_.size(); ++i) {
    // By value: a checkpointed layer calls this again in backward.
    hidden = run_layer(i, hidden, [layer = layers_[i], additive_mask](const at::Tensor& x) {
      return layer->forward(x, additive_mask);
    });
  }
  return head(hidden.select(1, 0));
}

at::Tensor BertForSequenceClassification::run_layer(size_t i, const at::Tensor& hidden,
                                                   const std::function<at::Tensor(const at::Tensor&)>& forward) {
  const int64_t unit = static_cast<int64_t>(i) + 1;
  // The unit hooks stay outside the checkpoint: a sharded strategy gathers
  // the layer before its forward and again (its pre-backward hook on the
  // layer's output) before the recomputation (docs/DESIGN.md, "Activation
  // checkpointing").
  before(unit);
  at::Tensor out = gradient_checkpointing_ && is_training()
                       ? checkpointed_forward(forward, hidden, layers_[i]->parameters())
                       : forward(hidden);
  return after(unit, std::move(out));
}

at::Tensor BertForSequenceClassification::forward_batch(const Batch& batch) {
  if (!unpadded_) return forward(batch.input_ids, batch.token_type_ids, batch.attention_mask);
  const PackedBatch p = pack_batch(batch).to(batch.input_ids.device());
  return forward_packed(p.input_ids, p.token_type_ids, p.position_ids, p.cu_seqlens, p.max_seqlen);
}

at::Tensor BertForSequenceClassification::forward_packed(const at::Tensor& input_ids, const at::Tensor& token_type_ids,
                                                         const at::Tensor& position_ids, const at::Tensor& cu_seqlens,
                                                         int64_t max_seqlen) {
  if (!input_ids.defined() || input_ids.dim() != 1)
    throw Error("forward_packed: input_ids must be [T] (the batch's tokens back to back)");
  const int64_t T = input_ids.size(0);
  check_sequence_length(max_seqlen, config_);
  for (const at::Tensor* t : {&token_type_ids, &position_ids})
    if (t->defined() && (t->dim() != 1 || t->size(0) != T))
      throw Error(str_format("forward_packed: token_type_ids and position_ids must be [T] = [%lld] like input_ids",
                             static_cast<long long>(T)));
  // The activations take the embeddings' dtype (as in forward()).
  const at::ScalarType dtype = embeddings_->word_embeddings->weight.scalar_type();
  const PackedLayout layout = PackedLayout::from_cu_seqlens(cu_seqlens, max_seqlen, dtype, input_ids.device());
  if (layout.padded_rows.size(0) != T)
    throw Error(str_format("forward_packed: cu_seqlens ends at %lld but input_ids has %lld tokens",
                           static_cast<long long>(layout.padded_rows.size(0)), static_cast<long long>(T)));
  at::Tensor types = token_type_ids.defined() ? token_type_ids : at::zeros_like(input_ids);
  // Positions within each sequence: a token's padded row modulo Lmax.
  at::Tensor positions = position_ids.defined() ? position_ids : layout.padded_rows.remainder(max_seqlen);

  before(0);
  at::Tensor hidden = after(0, embeddings_->forward_packed(input_ids, types, positions));  // [T, D]
  for (size_t i = 0; i < layers_.size(); ++i) {
    hidden = run_layer(i, hidden, [layer = layers_[i], layout](const at::Tensor& x) {
      return layer->forward_packed(x, layout);
    });
  }
  return head(hidden.index_select(0, layout.first_tokens));
}

at::Tensor BertForSequenceClassification::head(const at::Tensor& first_tokens) {
  const int64_t head_unit = num_units() - 1;
  before(head_unit);
  at::Tensor pooled = pooler_->forward_first_tokens(first_tokens);  // [B, D]
  return after(head_unit, classifier_(maybe_dropout(pooled, config_.effective_classifier_dropout(),
                                                    is_training())));  // [B, C]
}

void BertForSequenceClassification::before(int64_t unit) {
  if (hooks_) hooks_->before_forward(unit);
}

at::Tensor BertForSequenceClassification::after(int64_t unit, at::Tensor output) {
  return hooks_ ? hooks_->after_forward(unit, std::move(output)) : output;
}

int64_t BertForSequenceClassification::unit_of(const std::string& name) const {
  const std::string embeddings = "bert.embeddings.", layer = "bert.encoder.layer.";
  if (name.compare(0, embeddings.size(), embeddings) == 0) return 0;
  if (name.compare(0, layer.size(), layer) == 0) {
    const size_t dot = name.find('.', layer.size());
    if (dot != std::string::npos) {
      const std::string index = name.substr(layer.size(), dot - layer.size());
      if (!index.empty() && index.find_first_not_of("0123456789") == std::string::npos) {
        const int64_t i = std::stoll(index);
        if (i < static_cast<int64_t>(layers_.size())) return i + 1;
      }
    }
  } else if (name.compare(0, 12, "bert.pooler.") == 0 || name.compare(0, 11, "classifier.") == 0) {
    return num_units() - 1;
  }
  throw Error("'" + name + "' is not a parameter name of this BERT model");
}

at::Tensor BertForSequenceClassification::loss(const at::Tensor& logits_in, const at::Tensor& labels) const {
  // The loss in float32 whatever the logits' dtype, as torch.autocast computes it.
  const at::Tensor logits = logits_in.to(at::kFloat);
  std::string problem = config_.problem_type;
  if (problem.empty()) {
    if (config_.num_labels == 1)
      problem = "regression";
    else if (labels.scalar_type() == at::kLong || labels.scalar_type() == at::kInt)
      problem = "single_label_classification";
    else
      problem = "multi_label_classification";
  }
  if (problem == "regression") {
    if (config_.num_labels == 1) return at::mse_loss(logits.squeeze(), labels.squeeze().to(logits.scalar_type()));
    return at::mse_loss(logits, labels.to(logits.scalar_type()));
  }
  if (problem == "single_label_classification")
    return at::cross_entropy_loss(logits.view({-1, config_.num_labels}), labels.view({-1}).to(at::kLong));
  return at::binary_cross_entropy_with_logits(logits, labels.to(logits.scalar_type()));
}

void BertForSequenceClassification::init_weights(uint64_t seed) { init_weights(seed, {}); }

void BertForSequenceClassification::init_weights(uint64_t seed, const std::vector<std::string>& names) {
  const std::set<std::string> wanted(names.begin(), names.end());
  const std::string word_embeddings = "bert.embeddings.word_embeddings.weight";
  at::NoGradGuard no_grad;
  for (const auto& [name, param] : state_dict()) {
    if (!wanted.empty() && !wanted.count(name)) continue;
    if (ends_with(name, "LayerNorm.weight")) {
      param.fill_(1.0);
    } else if (ends_with(name, ".bias")) {
      param.zero_();
    } else {
      // One generator per parameter, seeded from (seed, name): a parameter's
      // init does not depend on which others are initialised or in what order.
      auto generator = at::detail::createCPUGenerator(mix(seed ^ mix(name_hash(name))));
      at::Tensor values = at::empty(param.sizes(), at::TensorOptions().dtype(at::kFloat));
      values.normal_(0.0, config_.initializer_range, generator);
      if (name == word_embeddings) values[config_.pad_token_id].zero_();
      param.copy_(values);
    }
  }
}

std::string BertForSequenceClassification::layer_prefix(int64_t i) {
  return "bert.encoder.layer." + std::to_string(i) + ".";
}

std::vector<std::pair<std::string, at::Tensor>> BertForSequenceClassification::state_dict() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& item : named_parameters(/*recurse=*/true)) out.emplace_back(item.key(), item.value());
  return out;
}

}  // namespace shardtrain
