#include "model/config_json.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "shardtrain/core/check.h"
#include "shardtrain/core/text.h"

namespace shardtrain::detail {

using json = nlohmann::json;

namespace {

const std::vector<std::string>& supported_activations() {
  static const std::vector<std::string> names = {
      "gelu",   "gelu_python", "gelu_new", "gelu_pytorch_tanh", "gelu_accurate", "gelu_fast", "quick_gelu",
      "gelu_10", "relu",       "relu2",    "relu6",             "leaky_relu",    "silu",      "swish",
      "mish",   "tanh",        "sigmoid",  "linear",            "laplace"};
  return names;
}

std::string strip_spaces(const std::string& text) {
  const size_t begin = text.find_first_not_of(" \t\n\r");
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(" \t\n\r") - begin + 1);
}

// A value echoed in an error: config files come from users, a value may be
// megabytes long.
std::string shown(const json& v) { return clip_for_message(v.dump(), 80); }

}  // namespace

void config_key_error(const std::string& source, const std::string& key, const std::string& problem) {
  throw Error(source + ": key \"" + key + "\": " + problem);
}

int64_t read_int(const json& j, const char* key, int64_t fallback, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  const json& v = j[key];
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() && std::fabs(v.get<double>()) < 1e15)
    return static_cast<int64_t>(v.get<double>());
  config_key_error(source, key, "expected an integer, got " + shown(v));
}

double read_double(const json& j, const char* key, double fallback, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  const json& v = j[key];
  if (v.is_number()) return v.get<double>();
  config_key_error(source, key, "expected a number, got " + shown(v));
}

std::string read_string(const json& j, const char* key, const std::string& fallback, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  const json& v = j[key];
  if (v.is_string()) return v.get<std::string>();
  config_key_error(source, key, "expected a string, got " + shown(v));
}

bool read_bool(const json& j, const char* key, bool fallback, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  const json& v = j[key];
  if (v.is_boolean()) return v.get<bool>();
  config_key_error(source, key, "expected true or false, got " + shown(v));
}

std::vector<std::string> read_id2label(const json& j, const std::string& source) {
  const json& v = j["id2label"];
  if (!v.is_object()) config_key_error(source, "id2label", "expected an object {\"0\": \"name\", ...}");
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
      config_key_error(source, "id2label",
                       "keys must be the ids 0.." + std::to_string(names.size() - 1) + " each once; got \"" +
                           clip_for_message(item.key(), 40) + "\"");
    if (!item.value().is_string()) config_key_error(source, "id2label", "label names must be strings");
    names[id] = item.value().get<std::string>();
    seen[id] = true;
  }
  return names;
}

void check_label2id(const json& j, const std::vector<std::string>& id2label, const std::string& source) {
  const json& v = j["label2id"];
  const auto disagree = [&](const std::string& what) {
    throw Error(source + ": id2label and label2id disagree: " + what +
                "; make label2id the inverse of id2label (or remove label2id)");
  };
  if (!v.is_object()) config_key_error(source, "label2id", "expected an object {\"name\": id, ...}");
  for (const auto& item : v.items()) {
    const std::string name = clip_for_message(item.key(), 40);
    if (!item.value().is_number_integer())
      config_key_error(source, "label2id", "the id of \"" + name + "\" must be an integer, got " + shown(item.value()));
    const int64_t id = item.value().get<int64_t>();
    if (id < 0 || id >= static_cast<int64_t>(id2label.size()))
      disagree("label2id[\"" + name + "\"] = " + std::to_string(id) + " is not an id of id2label (0.." +
               std::to_string(static_cast<int64_t>(id2label.size()) - 1) + ")");
    if (id2label[static_cast<size_t>(id)] != item.key())
      disagree("label2id[\"" + name + "\"] = " + std::to_string(id) + " but id2label[\"" + std::to_string(id) +
               "\"] = \"" + clip_for_message(id2label[static_cast<size_t>(id)], 40) + "\"");
  }
  if (v.size() != id2label.size())
    disagree("id2label has " + std::to_string(id2label.size()) + " labels, label2id " + std::to_string(v.size()));
}

void check_positive(const std::string& source, const char* key, int64_t value) {
  if (value <= 0) config_key_error(source, key, "must be positive, got " + std::to_string(value));
}

void check_probability(const std::string& source, const char* key, double p) {
  if (!(p >= 0.0 && p < 1.0)) config_key_error(source, key, "must be in [0, 1), got " + shortest_text(p));
}

void check_activation(const std::string& source, const char* key, const std::string& name) {
  const auto& acts = supported_activations();
  if (std::find(acts.begin(), acts.end(), name) != acts.end()) return;
  std::string list;
  for (const auto& a : acts) list += (list.empty() ? "" : ", ") + a;
  config_key_error(source, key, "\"" + clip_for_message(name, 60) + "\" is not supported (supported: " + list + ")");
}

std::vector<std::string> split_bar_list(const std::string& text) {
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return std::tolower(ch); });
  std::vector<std::string> parts;
  std::stringstream in(lower);
  for (std::string part; std::getline(in, part, '|');) parts.push_back(strip_spaces(part));
  return parts;
}

}  // namespace shardtrain::detail
