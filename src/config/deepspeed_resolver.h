// Private to the cli layer: the Resolver that reads a DeepSpeed JSON into a
// RunConfig (config/deepspeed_config.h says what it maps; docs/DESIGN.md, "Config
// is data; choices are enums" and "DeepSpeed and FSDP names").
//
// One walk over the JSON, one Resolver method per section, each in the file
// named after it:
//
//   deepspeed_config.cpp                    the walk: which top-level key goes to which section, the
//                                           top-level keys (gradient_clipping, steps_per_print, ...),
//                                           unknown keys, and every problem in one message
//   deepspeed_precision.cpp                 fp16 / bf16 -> train.mixed_precision, fp16's loss scaling
//   deepspeed_zero.cpp                      zero_optimization -> parallel.strategy, parallel.zero.*,
//                                           offload; its "auto" bucket sizes from the model's hidden size
//   deepspeed_batch.cpp                     train_batch_size, train_micro_batch_size_per_gpu,
//                                           gradient_accumulation_steps
//   deepspeed_optimizer.cpp                 optimizer -> AdamW's train.* keys
//   deepspeed_scheduler.cpp                 scheduler -> train.lr_scheduler_type and _kwargs
//   deepspeed_activation_checkpointing.cpp  activation_checkpointing -> model.gradient_checkpointing
//
// Every section writes into the run config through the one assign() rule
// below (a JSON value that contradicts a key the user set is an error naming
// both), reads values through the typed readers below (each problem names the
// key, its value and what was expected), and says what each key became in one
// printed line.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "shardtrain/config/deepspeed_config.h"
#include "shardtrain/core/enum_names.h"
#include "shardtrain/core/json_read.h"
#include "shardtrain/core/run_config.h"
#include "shardtrain/core/text.h"

namespace shardtrain::deepspeed {

using json = nlohmann::json;

// A value as the messages and printed lines write it.
inline std::string text(double value) { return shortest_text(value); }
inline std::string text(int64_t value) { return std::to_string(value); }
inline std::string text(bool value) { return value ? "true" : "false"; }
inline std::string text(const std::string& value) { return "\"" + value + "\""; }
template <class E, std::enable_if_t<is_named_enum_v<E>, int> = 0>
std::string text(E value) {
  return text(std::string(enum_name(value)));
}

// The string "auto" (Accelerate and transformers fill it from the run config).
inline bool is_auto(const json& v) { return v.is_string() && v.get<std::string>() == "auto"; }

// The value of `key` in an object, or nullptr when it is absent.
inline const json* find(const json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

// Walks the JSON once. Every problem is collected (never thrown early) so the
// user sees all of them in one message.
class Resolver {
 public:
  Resolver(RunConfig& config, const DeepSpeedContext& context) : c_(config), context_(context) {}

  // Reads every section of `root` (a JSON object) into the run config.
  void run(const json& root);

  std::vector<std::string> problems;
  DeepSpeedResolution out;

 private:
  // A problem names the key and its value (or "(absent)"); a line says what a key became.
  void problem(const std::string& key, const json* value, const std::string& why) {
    problems.push_back(value ? key + " = " + json_for_message(*value) + ": " + why : key + " (absent): " + why);
  }
  void line(const std::string& key, const json* value, const std::string& result) {
    out.lines.push_back(key + " = " + (value ? json_for_message(*value) : "(absent)") + " -> " + result);
  }

  // Writes a JSON-decided value into the run config, unless the user set that
  // key to something else: transformers refuses such a mismatch too.
  // `auto_allowed`: the JSON key may be "auto" (said in the hint).
  template <class T>
  bool assign(const std::string& run_key, T& field, const T& value, const std::string& json_key, const json* v,
              bool auto_allowed = true) {
    if (context_.keys_set.count(run_key) && !(field == value)) {
      problem(json_key, v,
              "means " + run_key + " = " + text(value) + " but the run config sets " + run_key + " = " + text(field) +
                  "; make them equal or remove one" +
                  (auto_allowed ? std::string(" (or write \"auto\" in the JSON to take the run config's value)")
                       : std::string()));
      return false;
    }
    field = value;
    out.keys_set.insert(run_key);
    return true;
  }

  // The typed readers: a value of another type, or below `min`, is a problem
  // naming what was expected (and "auto" where `auto_allowed`); nullopt then.
  std::optional<int64_t> integer(const std::string& key, const json& v, int64_t min, bool auto_allowed) {
    std::optional<int64_t> n;
    if (v.is_number_integer()) {
      n = v.get<int64_t>();
    } else if (v.is_number_float()) {
      // DeepSpeed configs write sizes as 5e8; they are integers all the same.
      const double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e18) n = static_cast<int64_t>(d);
    }
    if (n && *n >= min) return n;
    problem(key, &v, "expected an integer >= " + std::to_string(min) + (auto_allowed ? " or \"auto\"" : ""));
    return std::nullopt;
  }
  std::optional<double> number(const std::string& key, const json& v, double min, bool auto_allowed) {
    if (v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() >= min) return v.get<double>();
    problem(key, &v, "expected a number >= " + text(min) + (auto_allowed ? " or \"auto\"" : ""));
    return std::nullopt;
  }
  std::optional<bool> boolean(const std::string& key, const json& v) {
    if (v.is_boolean()) return v.get<bool>();
    problem(key, &v, "expected true or false");
    return std::nullopt;
  }
  bool object(const std::string& key, const json& v) {
    if (v.is_object()) return true;
    problem(key, &v, "expected an object { ... }");
    return false;
  }

  // The "params" object of a {"type": ..., "params": {...}} section (an empty
  // object when it is absent), after reporting the section's other keys;
  // nullptr when "params" is not an object.
  const json* params_of(const std::string& name, const json& section) {
    static const json kEmpty = json::object();
    const json* params = find(section, "params");
    if (params && !object(name + ".params", *params)) return nullptr;
    for (const auto& item : section.items())
      if (item.key() != "type" && item.key() != "params")
        problem(name + "." + item.key(), &item.value(), "not implemented (shardtrain reads type and params)");
    return params ? params : &kEmpty;
  }

  // resolve_scheduler's steps (deepspeed_scheduler.cpp); `letter` is the
  // type's (W WarmupLR, D WarmupDecayLR, C WarmupCosineLR).
  void resolve_scheduler_numbers(const json* params, char letter);
  void resolve_scheduler_steps(const json* params, const std::string& type_name, char letter);
  // resolve_zero's steps (deepspeed_zero.cpp).
  void read_zero_keys(const json& zero, int64_t stage, ZeroConfig& z, OffloadDevice& offload,
                      std::set<std::string>& given);
  void read_zero_offload(const std::string& name, const std::string& key, const json& v, OffloadDevice& offload);
  void apply_zero(const json* zero, int64_t stage, const ZeroConfig& z, OffloadDevice offload,
                  const std::set<std::string>& given);

  // zero_optimization's "auto" bucket sizes (deepspeed_zero.cpp): H * H,
  // int(0.9 * H * H) and 10 * H of the model's hidden size H, read once.
  std::optional<int64_t> hidden_size(const std::string& key, const json& v);
  std::optional<int64_t> auto_reduce_bucket(const std::string& key, const json& v);
  std::optional<int64_t> auto_prefetch_bucket(const std::string& key, const json& v);
  std::optional<int64_t> auto_persistence_threshold(const std::string& key, const json& v);

  // One per section, each in its file (see the top of this header); a null
  // pointer is an absent section. resolve_clipping is in deepspeed_config.cpp.
  void resolve_precision(const json* fp16, const json* bf16, const std::string& bf16_name);
  void resolve_loss_scale(const json* fp16);
  void resolve_zero(const json* zero);
  void resolve_batch(const json* micro, const json* accumulation, const json* total);
  void resolve_clipping(const json* clipping);
  void resolve_optimizer(const json* optimizer);
  void resolve_scheduler(const json* scheduler);
  void resolve_activation_checkpointing(const json* section);

  RunConfig& c_;
  const DeepSpeedContext& context_;
  std::optional<int64_t> hidden_size_;
  std::optional<double> optimizer_lr_;  // a number written in optimizer.params.lr
};

}  // namespace shardtrain::deepspeed
