// DeepSpeed's fp16 and bf16 sections -> train.mixed_precision, and fp16's
// loss scaling -> train.fp16.* (docs/DESIGN.md, "Mixed precision": the
// 16-bit parameters with an fp32 master, the loss scaler's rules).
#include <optional>
#include <string>

#include "config/deepspeed_resolver.h"

namespace shardtrain::deepspeed {

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

}  // namespace shardtrain::deepspeed
