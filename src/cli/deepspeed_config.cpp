// About 800 lines, one file on purpose: one walk over a DeepSpeed JSON, one
// Resolver per section (precision, zero_optimization, batch sizes, clipping,
// optimizer, scheduler, activation_checkpointing), all of them writing into the run config through the
// same assign() rule (a JSON value that contradicts a key the user set is an
// error naming both) and collecting every problem into one message. The
// sections are independent functions of the same class; the file is long
// because DeepSpeed has many keys, each with its meaning and default here.
#include "shardtrain/cli/deepspeed_config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>

#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/text.h"

namespace shardtrain {
namespace {

using json = nlohmann::json;

std::string text(double value) { return shortest_text(value); }
std::string text(int64_t value) { return std::to_string(value); }
std::string text(bool value) { return value ? "true" : "false"; }
std::string text(const std::string& value) { return "\"" + value + "\""; }
template <class E, std::enable_if_t<is_choice_v<E>, int> = 0>
std::string text(E value) {
  return text(std::string(choice_name(value)));
}

bool is_auto(const json& v) { return v.is_string() && v.get<std::string>() == "auto"; }

const json* find(const json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return std::tolower(ch); });
  return s;
}

// Where a batch-size key's value came from; absent and "auto" differ
// (DeepSpeed derives an absent one from train_batch_size, Accelerate fills "auto").
enum class Source { kAbsent, kAuto, kNumber, kInvalid };

// Walks the JSON once. Every problem is collected (never thrown early) so the
// user sees all of them in one message.
class Resolver {
 public:
  Resolver(RunConfig& config, const DeepSpeedContext& context) : c_(config), context_(context) {}

  void run(const json& root);

  std::vector<std::string> problems;
  DeepSpeedResolution out;

 private:
  void problem(const std::string& key, const json* value, const std::string& why) {
    problems.push_back(value ? key + " = " + value->dump() + ": " + why : key + " (absent): " + why);
  }
  void line(const std::string& key, const json* value, const std::string& result) {
    out.lines.push_back(key + " = " + (value ? value->dump() : "(absent)") + " -> " + result);
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

  // The model's hidden size, read once, for the "auto" bucket sizes.
  std::optional<int64_t> hidden_size(const std::string& key, const json& v) {
    if (context_.hidden_size > 0) return context_.hidden_size;
    if (!hidden_size_) {
      try {
        hidden_size_ = model_hidden_size(c_.model);
      } catch (const Error& e) {
        problem(key, &v, std::string("\"auto\" is the model's hidden_size squared or scaled, but ") + e.what());
        hidden_size_ = 0;
      }
    }
    if (*hidden_size_ <= 0) return std::nullopt;
    return hidden_size_;
  }

  // "auto" bucket sizes from the model's hidden size H, as Accelerate's
  // _prepare_deepspeed and transformers' HfTrainerDeepSpeedConfig fill them.
  std::optional<int64_t> auto_reduce_bucket(const std::string& key, const json& v) {
    auto h = hidden_size(key, v);
    if (!h) return std::nullopt;
    line(key, &v, str_format("parallel.zero.reduce_bucket_size = %lld (hidden_size %lld squared)",
                             static_cast<long long>(*h * *h), static_cast<long long>(*h)));
    return *h * *h;
  }
  std::optional<int64_t> auto_prefetch_bucket(const std::string& key, const json& v) {
    auto h = hidden_size(key, v);
    if (!h) return std::nullopt;
    const auto n = static_cast<int64_t>(0.9 * static_cast<double>(*h * *h));
    line(key, &v, str_format("parallel.zero.stage3_prefetch_bucket_size = %lld (int(0.9 x hidden_size %lld squared))",
                             static_cast<long long>(n), static_cast<long long>(*h)));
    return n;
  }
  std::optional<int64_t> auto_persistence_threshold(const std::string& key, const json& v) {
    auto h = hidden_size(key, v);
    if (!h) return std::nullopt;
    line(key, &v, str_format("parallel.zero.stage3_param_persistence_threshold = %lld (10 x hidden_size %lld)",
                             static_cast<long long>(10 * *h), static_cast<long long>(*h)));
    return 10 * *h;
  }

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

void Resolver::run(const json& root) {
  const json *micro = nullptr, *accumulation = nullptr, *total = nullptr, *clipping = nullptr;
  const json *fp16 = nullptr, *bf16 = nullptr, *zero = nullptr, *optimizer = nullptr, *scheduler = nullptr;
  const json* activation_checkpointing = nullptr;
  std::string bf16_name = "bf16";
  for (const auto& item : root.items()) {
    const std::string& key = item.key();
    const json& v = item.value();
    if (key == "train_micro_batch_size_per_gpu") micro = &v;
    else if (key == "gradient_accumulation_steps") accumulation = &v;
    else if (key == "train_batch_size") total = &v;
    else if (key == "gradient_clipping") clipping = &v;
    else if (key == "fp16") fp16 = &v;
    else if (key == "bf16" || key == "bfloat16") {  // "bfloat16" is DeepSpeed's older name
      if (bf16) problem(key, &v, "both \"bf16\" and \"bfloat16\" are given; keep one");
      bf16 = &v;
      bf16_name = key;
    } else if (key == "zero_optimization") zero = &v;
    else if (key == "optimizer") optimizer = &v;
    else if (key == "scheduler") scheduler = &v;
    else if (key == "activation_checkpointing") activation_checkpointing = &v;
    else if (key == "steps_per_print") {
      if (auto n = integer(key, v, 1, false)) {
        if (assign("train.log_every_steps", c_.train.log_every_steps, *n, key, &v))
          line(key, &v, "train.log_every_steps = " + text(*n));
      }
    } else if (key == "wall_clock_breakdown") {
      if (auto b = boolean(key, v)) {
        if (*b) problem(key, &v, "DeepSpeed's per-step timing breakdown is not implemented; set it to false");
        else line(key, &v, "accepted (no timing breakdown)");
      }
    } else if (key == "zero_allow_untested_optimizer" || key == "zero_force_ds_cpu_optimizer") {
      if (boolean(key, v)) line(key, &v, "accepted, no effect: the optimizer is always shardtrain's AdamW");
    } else if (key == "prescale_gradients") {
      if (auto b = boolean(key, v)) {
        if (*b) problem(key, &v, "dividing gradients before the reduction is not implemented; set it to false");
        else line(key, &v, "accepted (gradients are averaged after the reduction)");
      }
    } else if (key == "gradient_predivide_factor") {
      if (v.is_number() && v.get<double>() == 1.0) line(key, &v, "accepted (no pre-division)");
      else problem(key, &v, "only 1.0 (no pre-division) is implemented");
    } else {
      problem(key, &v, "not a DeepSpeed key shardtrain implements (it reads train_batch_size, "
                       "train_micro_batch_size_per_gpu, gradient_accumulation_steps, gradient_clipping, fp16, bf16, "
                       "zero_optimization, optimizer, scheduler, activation_checkpointing, steps_per_print, "
                       "wall_clock_breakdown)");
    }
  }
  resolve_precision(fp16, bf16, bf16_name);
  resolve_zero(zero);
  resolve_batch(micro, accumulation, total);
  resolve_clipping(clipping);
  resolve_optimizer(optimizer);
  resolve_scheduler(scheduler);
  resolve_activation_checkpointing(activation_checkpointing);
}

void Resolver::resolve_precision(const json* fp16, const json* bf16, const std::string& bf16_name) {
  // Absent or "auto": Accelerate takes it from its mixed_precision (ours: train.mixed_precision).
  // A section without "enabled" is off, as in DeepSpeed.
  auto enabled = [&](const json* section, const std::string& name, Precision precision) -> std::optional<bool> {
    const bool from_run = c_.train.mixed_precision == precision;
    const std::string key = name + ".enabled";
    if (!section) return from_run;
    if (!object(name, *section)) return std::nullopt;
    const json* value = find(*section, "enabled");
    if (!value) return false;
    if (is_auto(*value)) {
      line(key, value, text(from_run) + " (train.mixed_precision = " + text(c_.train.mixed_precision) + ")");
      return from_run;
    }
    return boolean(key, *value);
  };
  const std::optional<bool> use_fp16 = enabled(fp16, "fp16", Precision::kFp16);
  const std::optional<bool> use_bf16 = enabled(bf16, bf16_name, Precision::kBf16);
  if (!use_fp16 || !use_bf16) return;

  if (*use_fp16) resolve_loss_scale(fp16);
  if (bf16 && bf16->is_object()) {
    for (const auto& item : bf16->items())
      if (item.key() != "enabled") problem(bf16_name + "." + item.key(), &item.value(), "not implemented");
  }

  if (*use_fp16 && *use_bf16) {
    problem("fp16.enabled", fp16 ? find(*fp16, "enabled") : nullptr,
            "fp16 and " + bf16_name + " are both enabled; enable at most one");
    return;
  }
  if (*use_fp16 && (!context_.cuda_build || c_.run.device != Device::kCuda)) {
    const std::string why = !context_.cuda_build ? "this build of shardtrain has no CUDA" : "run.device is \"cpu\"";
    problem("fp16.enabled", fp16 ? find(*fp16, "enabled") : nullptr,
            "fp16 with loss scaling is a GPU mode and " + why +
                " (LibTorch's CPU kernels have no fp16 matmul). On CPU use bf16: \"fp16\": {\"enabled\": false} "
                "and \"bf16\": {\"enabled\": true} (or train.mixed_precision = \"bf16\"), or fp32 as "
                "configs/deepspeed/zero3_offload_fp32.json does" +
                (context_.cuda_build ? "; or run.device = \"cuda\"" : ""));
    return;
  }
  const Precision precision = *use_fp16 ? Precision::kFp16 : *use_bf16 ? Precision::kBf16 : Precision::kNo;
  if (assign("train.mixed_precision", c_.train.mixed_precision, precision, "fp16.enabled / " + bf16_name + ".enabled",
             fp16 ? fp16 : bf16))
    out.lines.push_back("fp16.enabled = " + text(*use_fp16) + ", " + bf16_name + ".enabled = " + text(*use_bf16) +
                        " -> train.mixed_precision = " + text(precision));
}

// The fp16 section's loss scaling onto train.fp16.*: DeepSpeed's
// DynamicLossScaler, with DeepSpeed's defaults for the keys the JSON leaves
// out (a run config without a JSON has GradScaler's).
void Resolver::resolve_loss_scale(const json* fp16) {
  struct Knob {
    const char* name;
    double deepspeed_default;
    double* real = nullptr;
    int64_t* integer = nullptr;
    bool* flag = nullptr;
  };
  Fp16Config& f = c_.train.fp16;
  Knob knobs[] = {{"loss_scale", 0, &f.loss_scale},
                  {"initial_scale_power", 16, nullptr, &f.initial_scale_power},
                  {"loss_scale_window", 1000, nullptr, &f.loss_scale_window},
                  {"hysteresis", 2, nullptr, &f.hysteresis},
                  {"consecutive_hysteresis", 0, nullptr, nullptr, &f.consecutive_hysteresis},
                  {"min_loss_scale", 1, &f.min_loss_scale}};
  if (fp16 && fp16->is_object()) {
    for (const auto& item : fp16->items()) {
      const std::string& name = item.key();
      if (name == "enabled") continue;
      bool known = false;
      for (const Knob& k : knobs) known = known || name == k.name;
      if (known) continue;
      if (name == "auto_cast" && item.value().is_boolean())
        line("fp16.auto_cast", &item.value(), "accepted (the model casts its inputs to the 16-bit dtype and keeps "
                                              "LayerNorm, softmax and the loss in fp32 either way)");
      else
        problem("fp16." + name, &item.value(), "not implemented (shardtrain reads enabled, loss_scale, "
                                               "initial_scale_power, loss_scale_window, hysteresis, "
                                               "consecutive_hysteresis, min_loss_scale, auto_cast)");
    }
  }
  for (const Knob& k : knobs) {
    const std::string key = std::string("fp16.") + k.name, run_key = std::string("train.fp16.") + k.name;
    const json* v = fp16 && fp16->is_object() ? find(*fp16, k.name) : nullptr;
    const std::string note = v ? "" : " (DeepSpeed's default)";
    if (k.flag) {
      bool value = k.deepspeed_default != 0;
      if (v) {
        auto b = boolean(key, *v);
        if (!b) continue;
        value = *b;
      }
      if (assign(run_key, *k.flag, value, key, v, false)) line(key, v, run_key + " = " + text(value) + note);
    } else if (k.integer) {
      int64_t value = static_cast<int64_t>(k.deepspeed_default);
      if (v) {
        auto n = integer(key, *v, 0, false);
        if (!n) continue;
        value = *n;
      }
      if (assign(run_key, *k.integer, value, key, v, false)) line(key, v, run_key + " = " + text(value) + note);
    } else {
      double value = k.deepspeed_default;
      if (v) {
        auto n = number(key, *v, 0, false);
        if (!n) continue;
        value = *n;
      }
      if (assign(run_key, *k.real, value, key, v, false)) line(key, v, run_key + " = " + text(value) + note);
    }
  }
}

void Resolver::resolve_zero(const json* zero) {
  int64_t stage = 0;
  if (zero && !object("zero_optimization", *zero)) return;
  if (zero) {
    if (const json* v = find(*zero, "stage")) {
      auto n = integer("zero_optimization.stage", *v, 0, false);
      if (!n) return;
      if (*n > 3) {
        problem("zero_optimization.stage", v, "ZeRO stages are 0, 1, 2 and 3");
        return;
      }
      stage = *n;
    }
  }
  static const StrategyKind kStrategies[] = {StrategyKind::kDdp, StrategyKind::kZero1, StrategyKind::kZero2,
                                             StrategyKind::kZero3};
  const StrategyKind strategy = kStrategies[stage];
  const json* stage_value = zero ? find(*zero, "stage") : nullptr;
  if (assign("parallel.strategy", c_.parallel.strategy, strategy, "zero_optimization.stage", stage_value, false))
    line("zero_optimization.stage", stage_value, "parallel.strategy = " + text(strategy) +
                                                     (stage_value ? "" : " (DeepSpeed's default stage 0)"));

  // DeepSpeed's defaults for keys the JSON leaves out (DeepSpeedZeroConfig).
  ZeroConfig z;
  z.overlap_comm = stage == 3;
  z.contiguous_gradients = true;
  z.reduce_bucket_size = 500000000;
  z.allgather_bucket_size = 500000000;
  z.round_robin_gradients = false;
  z.stage3_prefetch_bucket_size = 50000000;
  z.stage3_param_persistence_threshold = 100000;
  z.gather_16bit_weights_on_model_save = false;
  OffloadDevice offload = OffloadDevice::kNone;
  std::set<std::string> given;

  auto not_used = [&](const std::string& key, const json& v, const char* below) {
    line(key, &v, std::string("not used ") + below + " (DeepSpeed ignores it there too)");
  };
  auto size_key = [&](const std::string& key, const json& v, int64_t& field, const char* field_name,
                      std::optional<int64_t> (Resolver::*auto_rule)(const std::string&, const json&), bool stage3_only) {
    if (stage == 0 || (stage3_only && stage < 3)) {
      if (is_auto(v) || integer(key, v, 0, true)) not_used(key, v, stage == 0 ? "at stage 0 (ddp)" : "below stage 3");
      return;
    }
    std::optional<int64_t> n;
    if (is_auto(v)) {
      if (!auto_rule) {
        problem(key, &v, "neither Accelerate nor transformers fills this \"auto\"; give a number of elements");
        return;
      }
      n = (this->*auto_rule)(key, v);
    } else {
      n = integer(key, v, 0, auto_rule != nullptr);
      if (n) line(key, &v, std::string("parallel.zero.") + field_name + " = " + text(*n));
    }
    if (!n) return;
    field = *n;
    given.insert(field_name);
  };
  auto flag_key = [&](const std::string& key, const json& v, bool& field, const char* field_name, bool stage3_only) {
    auto b = boolean(key, v);
    if (!b) return;
    if (stage == 0 || (stage3_only && stage < 3)) {
      not_used(key, v, stage == 0 ? "at stage 0 (ddp)" : "below stage 3 (parameters are whole on every rank)");
      return;
    }
    field = *b;
    given.insert(field_name);
    line(key, &v, std::string("parallel.zero.") + field_name + " = " + text(*b));
  };

  if (zero) {
    for (const auto& item : zero->items()) {
      const std::string& name = item.key();
      const std::string key = "zero_optimization." + name;
      const json& v = item.value();
      if (name == "stage") continue;
      if (name == "offload_optimizer" || name == "offload_param") {
        if (!object(key, v)) continue;
        for (const auto& sub : v.items()) {
          const std::string sub_key = key + "." + sub.key();
          const json& sv = sub.value();
          if (sub.key() == "device") {
            const std::string device = sv.is_string() ? sv.get<std::string>() : "";
            if (device == "none" || (device == "cpu" && name == "offload_optimizer")) {
              if (name == "offload_optimizer") offload = parse_choice<OffloadDevice>(device, sub_key);
              else line(sub_key, &sv, "accepted (parameters stay in device memory)");
            } else if (name == "offload_param" && device == "cpu") {
              problem(sub_key, &sv, "parameter offload is not implemented (optimizer offload is: "
                                    "offload_optimizer.device = \"cpu\"); use \"none\"");
            } else {
              problem(sub_key, &sv, "allowed values are \"none\" and \"cpu\"" +
                                        std::string(name == "offload_param" ? " (offload_param: only \"none\")" : "") +
                                        "; NVMe offload is not implemented");
            }
          } else if (sub.key() == "pin_memory") {
            if (boolean(sub_key, sv))
              line(sub_key, &sv, "accepted (host buffers are pinned when a GPU is used, whatever the value)");
          } else {
            problem(sub_key, &sv, "not implemented (shardtrain reads device and pin_memory)");
          }
        }
      } else if (name == "overlap_comm") {
        flag_key(key, v, z.overlap_comm, "overlap_comm", false);
      } else if (name == "contiguous_gradients") {
        flag_key(key, v, z.contiguous_gradients, "contiguous_gradients", false);
      } else if (name == "round_robin_gradients") {
        flag_key(key, v, z.round_robin_gradients, "round_robin_gradients", false);
      } else if (name == "reduce_bucket_size") {
        size_key(key, v, z.reduce_bucket_size, "reduce_bucket_size", &Resolver::auto_reduce_bucket, false);
      } else if (name == "allgather_bucket_size") {
        size_key(key, v, z.allgather_bucket_size, "allgather_bucket_size", nullptr, false);
      } else if (name == "stage3_prefetch_bucket_size" || name == "prefetch_bucket_size") {
        size_key(key, v, z.stage3_prefetch_bucket_size, "stage3_prefetch_bucket_size", &Resolver::auto_prefetch_bucket,
                 true);
      } else if (name == "stage3_param_persistence_threshold" || name == "param_persistence_threshold") {
        size_key(key, v, z.stage3_param_persistence_threshold, "stage3_param_persistence_threshold",
                 &Resolver::auto_persistence_threshold, true);
      } else if (name == "gather_16bit_weights_on_model_save" || name == "stage3_gather_16bit_weights_on_model_save" ||
                 name == "stage3_gather_fp16_weights_on_model_save") {
        if (is_auto(v)) {
          // Accelerate fills "auto" with false (its zero3_save_16bit_model default).
          line(key, &v, "false (as Accelerate fills it)");
          continue;
        }
        flag_key(key, v, z.gather_16bit_weights_on_model_save, "gather_16bit_weights_on_model_save", true);
      } else if (name == "allgather_partitions" || name == "reduce_scatter") {
        // DeepSpeed's defaults, and the only way the sharded strategies work.
        if (auto b = boolean(key, v)) {
          if (*b) line(key, &v, "accepted (what the sharded strategies do)");
          else problem(key, &v, "only true is implemented (reduce-scatter / all-gather of the shards)");
        }
      } else {
        problem(key, &v, "not implemented by shardtrain (it reads stage, offload_optimizer, offload_param, "
                         "overlap_comm, contiguous_gradients, round_robin_gradients, reduce_bucket_size, "
                         "allgather_bucket_size, stage3_prefetch_bucket_size, stage3_param_persistence_threshold, "
                         "gather_16bit_weights_on_model_save, allgather_partitions, reduce_scatter)");
      }
    }
  }

  const json* device = nullptr;
  if (zero)
    if (const json* o = find(*zero, "offload_optimizer"); o && o->is_object()) device = find(*o, "device");
  if (stage == 0) {
    if (offload != OffloadDevice::kNone)
      problem("zero_optimization.offload_optimizer.device", device, "optimizer offload needs ZeRO stage 1, 2 or 3");
    return;
  }
  if (assign("parallel.offload_optimizer", c_.parallel.offload_optimizer, offload,
             "zero_optimization.offload_optimizer.device", device, false))
    line("zero_optimization.offload_optimizer.device", device, "parallel.offload_optimizer = " + text(offload));

  auto set = [&](const char* name, auto& field, const auto& value) {
    const std::string key = std::string("zero_optimization.") + name;
    const json* v = zero ? find(*zero, name) : nullptr;
    if (assign(std::string("parallel.zero.") + name, field, value, key, v, false) && !given.count(name))
      line(key, nullptr, "parallel.zero." + std::string(name) + " = " + text(value) + " (DeepSpeed's default)");
  };
  ZeroConfig& target = c_.parallel.zero;
  set("overlap_comm", target.overlap_comm, z.overlap_comm);
  set("contiguous_gradients", target.contiguous_gradients, z.contiguous_gradients);
  set("round_robin_gradients", target.round_robin_gradients, z.round_robin_gradients);
  set("reduce_bucket_size", target.reduce_bucket_size, z.reduce_bucket_size);
  set("allgather_bucket_size", target.allgather_bucket_size, z.allgather_bucket_size);
  if (stage == 3) {
    set("stage3_prefetch_bucket_size", target.stage3_prefetch_bucket_size, z.stage3_prefetch_bucket_size);
    set("stage3_param_persistence_threshold", target.stage3_param_persistence_threshold,
        z.stage3_param_persistence_threshold);
    set("gather_16bit_weights_on_model_save", target.gather_16bit_weights_on_model_save,
        z.gather_16bit_weights_on_model_save);
  }
}

void Resolver::resolve_batch(const json* micro_json, const json* accumulation_json, const json* total_json) {
  const int64_t world = context_.world_size;
  auto read = [&](const char* key, const json* v, int64_t& value) {
    if (!v) return Source::kAbsent;
    if (is_auto(*v)) return Source::kAuto;
    auto n = integer(key, *v, 1, true);
    if (!n) return Source::kInvalid;
    value = *n;
    return Source::kNumber;
  };
  int64_t micro = 0, accumulation = 0, total = 0;
  Source micro_source = read("train_micro_batch_size_per_gpu", micro_json, micro);
  Source accumulation_source = read("gradient_accumulation_steps", accumulation_json, accumulation);
  Source total_source = read("train_batch_size", total_json, total);
  if (micro_source == Source::kInvalid || accumulation_source == Source::kInvalid || total_source == Source::kInvalid)
    return;

  // "auto": Accelerate fills it from the run (dataloader batch size, accumulation steps).
  std::string micro_note, accumulation_note;
  if (micro_source == Source::kAuto) {
    micro = c_.train.batch_size;
    micro_note = "(the run config's)";
  }
  if (accumulation_source == Source::kAuto) {
    accumulation = c_.train.gradient_accumulation_steps;
    accumulation_note = "(the run config's)";
  }
  if (total_source == Source::kNumber) {
    // DeepSpeed's _configure_train_batch_size: an absent value is derived from the others.
    auto derive = [&](int64_t divisor, int64_t& value, const char* what, std::string& note) {
      if (total % divisor != 0) {
        problem("train_batch_size", total_json,
                str_format("cannot derive %s: %lld is not divisible by %lld", what, static_cast<long long>(total),
                           static_cast<long long>(divisor)));
        return false;
      }
      value = total / divisor;
      note = "(train_batch_size / the others, as DeepSpeed derives it)";
      return true;
    };
    if (micro_source == Source::kAbsent && accumulation_source == Source::kAbsent) {
      accumulation = 1;
      accumulation_note = "(DeepSpeed's default)";
      if (!derive(world, micro, "train_micro_batch_size_per_gpu", micro_note)) return;
    } else if (micro_source == Source::kAbsent) {
      if (!derive(accumulation * world, micro, "train_micro_batch_size_per_gpu", micro_note)) return;
    } else if (accumulation_source == Source::kAbsent) {
      if (!derive(micro * world, accumulation, "gradient_accumulation_steps", accumulation_note)) return;
    }
    if (micro * accumulation * world != total) {
      problem("train_batch_size", total_json,
              str_format("must equal train_micro_batch_size_per_gpu (%lld) x gradient_accumulation_steps (%lld) x "
                         "world size (%lld) = %lld; fix one of them or write \"auto\" (the world size is the job's "
                         "number of ranks; `shardtrain config --world-size N` checks another)",
                         static_cast<long long>(micro), static_cast<long long>(accumulation),
                         static_cast<long long>(world), static_cast<long long>(micro * accumulation * world)));
      return;
    }
  } else {
    if (micro_source == Source::kAbsent) {
      micro = c_.train.batch_size;
      micro_note = "(the run config's; DeepSpeed would need it or train_batch_size)";
    }
    if (accumulation_source == Source::kAbsent) {
      accumulation = 1;
      accumulation_note = "(DeepSpeed's and Accelerate's default)";
    }
    total = micro * accumulation * world;
  }
  auto noted = [](const std::string& note) { return note.empty() ? std::string() : " " + note; };
  if (assign("train.batch_size", c_.train.batch_size, micro, "train_micro_batch_size_per_gpu", micro_json))
    line("train_micro_batch_size_per_gpu", micro_json, "train.batch_size = " + text(micro) + noted(micro_note));
  if (assign("train.gradient_accumulation_steps", c_.train.gradient_accumulation_steps, accumulation,
             "gradient_accumulation_steps", accumulation_json))
    line("gradient_accumulation_steps", accumulation_json,
         "train.gradient_accumulation_steps = " + text(accumulation) + noted(accumulation_note));
  line("train_batch_size", total_json,
       str_format("%lld (%lld per rank x %lld accumulation steps x %lld ranks)", static_cast<long long>(total),
                  static_cast<long long>(micro), static_cast<long long>(accumulation), static_cast<long long>(world)));
}

void Resolver::resolve_clipping(const json* v) {
  const char* key = "gradient_clipping";
  double value = 0;
  std::string note;
  if (!v) {
    note = " (DeepSpeed's default: no clipping)";
  } else if (is_auto(*v)) {
    value = c_.train.max_grad_norm;
    note = " (the run config's)";
  } else if (v->is_boolean()) {
    value = v->get<bool>() ? 1.0 : 0.0;  // DeepSpeed reads the number: true is 1.0
  } else if (auto n = number(key, *v, 0, true)) {
    value = *n;
  } else {
    return;
  }
  if (assign("train.max_grad_norm", c_.train.max_grad_norm, value, key, v))
    line(key, v, "train.max_grad_norm = " + text(value) + note);
}

void Resolver::resolve_optimizer(const json* optimizer) {
  if (!optimizer) {
    line("optimizer", nullptr, "AdamW from the run config (train.lr, train.adam_beta1/2, train.adam_epsilon, "
                               "train.weight_decay), as with a torch optimizer under Accelerate");
    return;
  }
  if (!object("optimizer", *optimizer)) return;
  const json* type = find(*optimizer, "type");
  const std::string type_name = type && type->is_string() ? lower(type->get<std::string>()) : "";
  if (type_name != "adamw" && type_name != "adam") {
    problem("optimizer.type", type, "only \"AdamW\" (or \"Adam\" with adam_w_mode true) is implemented");
    return;
  }
  const json empty = json::object();
  const json* params = find(*optimizer, "params");
  if (params && !object("optimizer.params", *params)) return;
  if (!params) params = &empty;
  for (const auto& item : optimizer->items())
    if (item.key() != "type" && item.key() != "params")
      problem("optimizer." + item.key(), &item.value(), "not implemented (shardtrain reads type and params)");

  bool torch_adam = false;
  if (const json* v = find(*params, "torch_adam")) {
    if (auto b = boolean("optimizer.params.torch_adam", *v)) {
      torch_adam = *b;
      line("optimizer.params.torch_adam", v, "accepted (shardtrain's AdamW computes what torch.optim.AdamW does)");
    }
  }
  if (const json* v = find(*params, "adam_w_mode")) {
    if (auto b = boolean("optimizer.params.adam_w_mode", *v)) {
      if (!*b && type_name == "adam")
        problem("optimizer.params.adam_w_mode", v, "Adam with L2 regularisation is not implemented; shardtrain's "
                                                   "optimizer is AdamW (decoupled weight decay): set it to true");
      else
        line("optimizer.params.adam_w_mode", v, "accepted (AdamW: decoupled weight decay)");
    }
  } else if (type_name == "adam") {
    line("optimizer.params.adam_w_mode", nullptr, "true (DeepSpeed's default: Adam runs as AdamW)");
  }

  // "auto": transformers fills lr, betas, eps, weight_decay from TrainingArguments;
  // absent: the DeepSpeed optimizer's own defaults (torch.optim.AdamW with torch_adam).
  auto scalar = [&](const char* name, double& field, const char* run_key, double absent_value, double min) {
    const std::string key = std::string("optimizer.params.") + name;
    const json* v = find(*params, name);
    if (v && is_auto(*v)) {
      line(key, v, text(field) + " (" + run_key + ")");
      return;
    }
    double value = absent_value;
    if (v) {
      auto n = number(key, *v, min, true);
      if (!n) return;
      value = *n;
      if (std::string(name) == "lr") optimizer_lr_ = value;
    }
    if (assign(run_key, field, value, key, v))
      line(key, v, std::string(run_key) + " = " + text(value) + (v ? "" : " (DeepSpeed's default)"));
  };
  scalar("lr", c_.train.lr, "train.lr", 1e-3, 0);
  scalar("eps", c_.train.adam_epsilon, "train.adam_epsilon", 1e-8, 0);
  scalar("weight_decay", c_.train.weight_decay, "train.weight_decay", torch_adam ? 0.01 : 0.0, 0);

  const json* betas = find(*params, "betas");
  if (betas && is_auto(*betas)) {
    line("optimizer.params.betas", betas,
         "[" + text(c_.train.adam_beta1) + ", " + text(c_.train.adam_beta2) + "] (train.adam_beta1, train.adam_beta2)");
  } else {
    double beta1 = 0.9, beta2 = 0.999;
    if (betas) {
      const bool ok = betas->is_array() && betas->size() == 2 && (*betas)[0].is_number() && (*betas)[1].is_number() &&
                      (*betas)[0].get<double>() >= 0 && (*betas)[0].get<double>() < 1 &&
                      (*betas)[1].get<double>() >= 0 && (*betas)[1].get<double>() < 1;
      if (!ok) {
        problem("optimizer.params.betas", betas, "expected [beta1, beta2], each in [0, 1), or \"auto\"");
      } else {
        beta1 = (*betas)[0].get<double>();
        beta2 = (*betas)[1].get<double>();
      }
      if (!ok) beta1 = -1;
    }
    if (beta1 >= 0 && assign("train.adam_beta1", c_.train.adam_beta1, beta1, "optimizer.params.betas", betas) &&
        assign("train.adam_beta2", c_.train.adam_beta2, beta2, "optimizer.params.betas", betas))
      line("optimizer.params.betas", betas,
           "train.adam_beta1 = " + text(beta1) + ", train.adam_beta2 = " + text(beta2) +
               (betas ? "" : " (DeepSpeed's default)"));
  }
  for (const auto& item : params->items()) {
    static const char* kRead[] = {"lr", "betas", "eps", "weight_decay", "torch_adam", "adam_w_mode"};
    if (std::find(std::begin(kRead), std::end(kRead), item.key()) == std::end(kRead))
      problem("optimizer.params." + item.key(), &item.value(),
              "not implemented (shardtrain reads lr, betas, eps, weight_decay, torch_adam, adam_w_mode)");
  }
}

// DeepSpeed's scheduler section -> train.lr_scheduler_type (the DeepSpeed type
// name) and train.lr_scheduler_kwargs.*, warmup_max_lr -> train.lr,
// warmup_num_steps -> train.warmup_steps. Absent params take DeepSpeed's
// defaults (lr_schedules.py); "auto" is filled as transformers'
// HfTrainerDeepSpeedConfig fills it. optim/schedule.h computes the schedule.
void Resolver::resolve_scheduler(const json* scheduler) {
  if (!scheduler) {
    line("scheduler", nullptr, "train.lr_scheduler_type = " + text(c_.train.lr_scheduler_type) +
                                   " from the run config, as with a transformers scheduler under Accelerate");
    return;
  }
  if (!object("scheduler", *scheduler)) return;
  const json* type = find(*scheduler, "type");
  const std::string type_name = type && type->is_string() ? type->get<std::string>() : "";
  struct Param { const char* name; const char* types; };  // W: WarmupLR, D: WarmupDecayLR, C: WarmupCosineLR
  static const Param kParams[] = {{"warmup_min_lr", "WD"},  {"warmup_max_lr", "WD"},   {"warmup_num_steps", "WDC"},
                                  {"warmup_type", "WDC"},   {"total_num_steps", "DC"}, {"warmup_min_ratio", "C"},
                                  {"cos_min_ratio", "C"},   {"last_batch_iteration", "WDC"}};
  char letter = 0;
  LrSchedulerType kind = LrSchedulerType::kLinear;
  if (type_name == "WarmupLR") letter = 'W', kind = LrSchedulerType::kWarmupLR;
  else if (type_name == "WarmupDecayLR") letter = 'D', kind = LrSchedulerType::kWarmupDecayLR;
  else if (type_name == "WarmupCosineLR") letter = 'C', kind = LrSchedulerType::kWarmupCosineLR;
  if (!letter) {
    problem("scheduler.type", type,
            type_name == "LRRangeTest" || type_name == "OneCycle"
                ? "not implemented (shardtrain implements \"WarmupLR\", \"WarmupDecayLR\" and \"WarmupCosineLR\")"
                : "expected \"WarmupLR\", \"WarmupDecayLR\" or \"WarmupCosineLR\"");
    return;
  }
  if (assign("train.lr_scheduler_type", c_.train.lr_scheduler_type, kind, "scheduler.type", type, false))
    line("scheduler.type", type, "train.lr_scheduler_type = " + text(kind));
  const json empty = json::object();
  const json* params = find(*scheduler, "params");
  if (params && !object("scheduler.params", *params)) return;
  if (!params) params = &empty;
  for (const auto& item : scheduler->items())
    if (item.key() != "type" && item.key() != "params")
      problem("scheduler." + item.key(), &item.value(), "not implemented (shardtrain reads type and params)");
  std::string names;
  for (const Param& p : kParams)
    if (std::strchr(p.types, letter)) names += std::string(names.empty() ? "" : ", ") + p.name;
  for (const auto& item : params->items()) {
    const Param* known = nullptr;
    for (const Param& p : kParams)
      if (item.key() == p.name && std::strchr(p.types, letter)) known = &p;
    if (!known)
      problem("scheduler.params." + item.key(), &item.value(),
              "not a " + type_name + " parameter (it has " + names + ")");
  }

  LrSchedulerKwargs& k = c_.train.lr_scheduler_kwargs;
  const std::string kw = "train.lr_scheduler_kwargs.";
  auto key_of = [](const char* name) { return std::string("scheduler.params.") + name; };
  auto reads = [&](const char* name) {
    for (const Param& p : kParams)
      if (std::string(name) == p.name) return std::strchr(p.types, letter) != nullptr;
    return false;
  };
  // A number param: absent -> DeepSpeed's default; "auto" only where transformers fills it.
  auto number_param = [&](const char* name, double& field, const std::string& run_key, double absent,
                          std::optional<double> auto_value, const std::string& auto_note) {
    if (!reads(name)) return;
    const json* v = find(*params, name);
    double value = absent;
    std::string note = " (DeepSpeed's default)";
    if (v && is_auto(*v) && auto_value) {
      value = *auto_value;
      note = " " + auto_note;
    } else if (v) {
      auto n = number(key_of(name), *v, 0, auto_value.has_value());
      if (!n) return;
      value = *n;
      note.clear();
    }
    if (std::string(name) == "warmup_max_lr" && optimizer_lr_ && *optimizer_lr_ != value) {
      problem(key_of(name), v,
              "means train.lr = " + text(value) + note + ", which differs from optimizer.params.lr = " +
                  text(*optimizer_lr_) + " (DeepSpeed would silently train with warmup_max_lr); make them equal");
      return;
    }
    if (assign(run_key, field, value, key_of(name), v, auto_value.has_value()))
      line(key_of(name), v, run_key + " = " + text(value) + note);
  };
  number_param("warmup_min_lr", k.warmup_min_lr, kw + "warmup_min_lr", 0.0, 0.0, "(as transformers fills it)");
  number_param("warmup_max_lr", c_.train.lr, "train.lr", 0.001, c_.train.lr, "(train.lr, as transformers fills it)");
  number_param("warmup_min_ratio", k.warmup_min_ratio, kw + "warmup_min_ratio", 0.0, std::nullopt, "");
  number_param("cos_min_ratio", k.cos_min_ratio, kw + "cos_min_ratio", 0.0001, std::nullopt, "");

  if (const json* v = find(*params, "warmup_num_steps"); v && is_auto(*v)) {
    line(key_of("warmup_num_steps"), v,
         (c_.train.warmup_steps > 0 || c_.train.warmup_ratio == 0
              ? text(c_.train.warmup_steps) + " (train.warmup_steps"
              : "ceil(" + text(c_.train.warmup_ratio) + " x total steps) (train.warmup_ratio") +
             ", as transformers fills it; DeepSpeed warms up over at least 2 steps)");
  } else {
    int64_t steps = 1000;  // DeepSpeed's default
    std::optional<int64_t> n = steps;
    if (v) n = integer(key_of("warmup_num_steps"), *v, 0, true);
    if (n) {
      steps = *n;
      if (assign("train.warmup_steps", c_.train.warmup_steps, steps, key_of("warmup_num_steps"), v) &&
          assign("train.warmup_ratio", c_.train.warmup_ratio, 0.0, key_of("warmup_num_steps"), v))
        line(key_of("warmup_num_steps"), v,
             "train.warmup_steps = " + text(steps) + (v ? "" : " (DeepSpeed's default)"));
    }
  }
  {
    const json* v = find(*params, "warmup_type");
    std::optional<WarmupType> value = WarmupType::kLog;  // DeepSpeed's default
    if (v) value = v->is_string() ? find_choice<WarmupType>(v->get<std::string>()) : std::nullopt;
    bool ok = true;
    if (!value) {
      // DeepSpeed would warn and use "log".
      problem(key_of("warmup_type"), v, "expected \"log\" or \"linear\"");
      ok = false;
    }
    if (ok && assign(kw + "warmup_type", k.warmup_type, *value, key_of("warmup_type"), v, false))
      line(key_of("warmup_type"), v, kw + "warmup_type = " + text(*value) + (v ? "" : " (DeepSpeed's default)"));
  }
  if (reads("total_num_steps")) {
    const json* v = find(*params, "total_num_steps");
    if (!v) {
      problem(key_of("total_num_steps"), nullptr,
              type_name + " needs it (DeepSpeed has no default); write \"auto\" for the run's number of steps");
    } else if (is_auto(*v)) {
      if (assign(kw + "total_num_steps", k.total_num_steps, int64_t{0}, key_of("total_num_steps"), v))
        line(key_of("total_num_steps"), v, "the run's total optimizer steps, as transformers fills it (" + kw +
                                               "total_num_steps = 0)");
    } else if (auto n = integer(key_of("total_num_steps"), *v, 1, true)) {
      if (assign(kw + "total_num_steps", k.total_num_steps, *n, key_of("total_num_steps"), v))
        line(key_of("total_num_steps"), v, kw + "total_num_steps = " + text(*n));
    }
  }
  if (const json* v = find(*params, "last_batch_iteration")) {
    if (v->is_number() && v->get<double>() == -1)
      line(key_of("last_batch_iteration"), v, "accepted (a fresh schedule; resume restores it)");
    else
      problem(key_of("last_batch_iteration"), v,
              "only -1 is implemented (a resumed run restores the schedule from its checkpoint)");
  }
}

}  // namespace

int64_t model_hidden_size(const ModelConfig& model) {
  std::string file;
  if (!model.config.empty() && (model.init == ModelInit::kRandom || model.path.empty())) file = model.config;
  else if (!model.path.empty()) file = model.path + "/config.json";
  if (file.empty()) throw Error("neither model.config nor model.path names a config.json with hidden_size");
  std::ifstream in(file);
  if (!in) throw Error("cannot open '" + file + "' to read the model's hidden_size");
  json config;
  try {
    config = json::parse(in);
  } catch (const json::exception& e) {
    throw Error("cannot parse '" + file + "' (JSON): " + e.what());
  }
  if (config.is_object()) {
    if (const json* sizes = find(config, "hidden_sizes"); sizes && sizes->is_array() && !sizes->empty()) {
      int64_t largest = 0;
      for (const auto& s : *sizes)
        if (s.is_number_integer()) largest = std::max<int64_t>(largest, s.get<int64_t>());
      if (largest > 0) return largest;
    }
    if (const json* size = find(config, "hidden_size"); size && size->is_number_integer() && size->get<int64_t>() > 0)
      return size->get<int64_t>();
  }
  throw Error("'" + file + "' has no positive integer \"hidden_size\"");
}

DeepSpeedResolution apply_deepspeed_config(RunConfig& config, const DeepSpeedContext& context) {
  const std::string& path = config.parallel.deepspeed_config;
  if (path.empty()) return {};
  ST_ASSERT(context.world_size >= 1, "world size must be >= 1");
  std::ifstream in(path);
  if (!in) throw Error("parallel.deepspeed_config = '" + path + "': no such file (or it cannot be read)");
  json root;
  try {
    root = json::parse(in);
  } catch (const json::exception& e) {
    throw Error("parallel.deepspeed_config = '" + path + "': not valid JSON: " + e.what());
  }
  if (!root.is_object()) throw Error("parallel.deepspeed_config = '" + path + "': expected a JSON object { ... }");

  Resolver resolver(config, context);
  resolver.run(root);
  if (!resolver.problems.empty()) {
    std::string message = "parallel.deepspeed_config = '" + path + "': " + std::to_string(resolver.problems.size()) +
                          (resolver.problems.size() == 1 ? " key needs" : " keys need") + " changing:";
    for (const auto& p : resolver.problems) message += "\n  - " + p;
    throw Error(message);
  }
  for (auto& l : resolver.out.lines) l = "deepspeed: " + l;
  return resolver.out;
}

// DeepSpeed's activation_checkpointing section: its presence turns on
// model.gradient_checkpointing (each encoder layer checkpointed, as HF's
// gradient_checkpointing_enable() does under the DeepSpeed integration). The
// knobs for model parallelism and DeepSpeed's own buffers have nothing to act
// on here: accepted where they change nothing, refused where they would.
void Resolver::resolve_activation_checkpointing(const json* section) {
  const char* name = "activation_checkpointing";
  if (!section) return;
  if (!object(name, *section)) return;
  if (assign("model.gradient_checkpointing", c_.model.gradient_checkpointing, true, name, section, false))
    line(name, section, "model.gradient_checkpointing = true (every encoder layer recomputed in backward)");
  for (const auto& item : section->items()) {
    const std::string key = std::string(name) + "." + item.key();
    const json& v = item.value();
    if (item.key() == "number_checkpoints") {
      if (v.is_null() || v.is_number_integer()) line(key, &v, "accepted, no effect: every encoder layer is a checkpoint");
      else problem(key, &v, "expected an integer or null");
      continue;
    }
    const std::optional<bool> b = boolean(key, v);
    if (!b) continue;
    if (item.key() == "partition_activations") {
      line(key, &v, "accepted, no effect: activations are partitioned across model-parallel ranks, and there are "
                    "none (data parallelism only)");
    } else if (item.key() == "contiguous_memory_optimization") {
      line(key, &v, "accepted, no effect: each checkpointed input is its own tensor");
    } else if (item.key() == "synchronize_checkpoint_boundary") {
      line(key, &v, "accepted, no effect on results (a device synchronization for timing)");
    } else if (item.key() == "cpu_checkpointing" || item.key() == "profile") {
      if (*b)
        problem(key, &v, item.key() == "profile" ? "DeepSpeed's checkpointing profiler is not implemented; set it to false"
                                                 : "keeping checkpointed activations in host memory is not "
                                                   "implemented; set it to false");
      else
        line(key, &v, "accepted");
    } else {
      problem(key, &v, "not a DeepSpeed activation_checkpointing key (partition_activations, cpu_checkpointing, "
                       "contiguous_memory_optimization, number_checkpoints, synchronize_checkpoint_boundary, profile)");
    }
  }
}

}  // namespace shardtrain
