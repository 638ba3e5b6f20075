// DeepSpeed's zero_optimization section -> parallel.strategy (the stage),
// parallel.offload_optimizer and parallel.zero.* (docs/DESIGN.md, "DeepSpeed
// and FSDP names", "Sharded units"), and the "auto" bucket sizes it may ask
// for, computed from the model's hidden size as Accelerate and transformers
// compute them.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>
#include <set>
#include <string>

#include "config/deepspeed_resolver.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain {
namespace deepspeed {

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

  if (zero) read_zero_keys(*zero, stage, z, offload, given);
  apply_zero(zero, stage, z, offload, given);
}

// The keys of zero_optimization but its stage, into `z` (which holds
// DeepSpeed's defaults), `offload` and `given` (the parallel.zero fields set).
void Resolver::read_zero_keys(const json& zero, int64_t stage, ZeroConfig& z, OffloadDevice& offload,
                              std::set<std::string>& given) {
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

  for (const auto& item : zero.items()) {
    const std::string& name = item.key();
    const std::string key = "zero_optimization." + name;
    const json& v = item.value();
    if (name == "stage") continue;
    if (name == "offload_optimizer" || name == "offload_param") {
      read_zero_offload(name, key, v, offload);
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

// zero_optimization.offload_optimizer / offload_param (`name`): the device
// into `offload`, pin_memory accepted.
void Resolver::read_zero_offload(const std::string& name, const std::string& key, const json& v,
                                 OffloadDevice& offload) {
  if (!object(key, v)) return;
  for (const auto& sub : v.items()) {
    const std::string sub_key = key + "." + sub.key();
    const json& sv = sub.value();
    if (sub.key() == "device") {
      const std::string device = sv.is_string() ? sv.get<std::string>() : "";
      if (device == "none" || (device == "cpu" && name == "offload_optimizer")) {
        if (name == "offload_optimizer") offload = parse_enum<OffloadDevice>(device, sub_key);
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
}

// The stage's offload and parallel.zero fields into the run config, with
// DeepSpeed's defaults for those the JSON left out.
void Resolver::apply_zero(const json* zero, int64_t stage, const ZeroConfig& z, OffloadDevice offload,
                          const std::set<std::string>& given) {
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

// ---- "auto" bucket sizes: the model's hidden size ---------------------------

std::optional<int64_t> Resolver::hidden_size(const std::string& key, const json& v) {
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
std::optional<int64_t> Resolver::auto_reduce_bucket(const std::string& key, const json& v) {
  auto h = hidden_size(key, v);
  if (!h) return std::nullopt;
  line(key, &v, str_format("parallel.zero.reduce_bucket_size = %lld (hidden_size %lld squared)",
                           static_cast<long long>(*h * *h), static_cast<long long>(*h)));
  return *h * *h;
}
std::optional<int64_t> Resolver::auto_prefetch_bucket(const std::string& key, const json& v) {
  auto h = hidden_size(key, v);
  if (!h) return std::nullopt;
  const auto n = static_cast<int64_t>(0.9 * static_cast<double>(*h * *h));
  line(key, &v, str_format("parallel.zero.stage3_prefetch_bucket_size = %lld (int(0.9 x hidden_size %lld squared))",
                           static_cast<long long>(n), static_cast<long long>(*h)));
  return n;
}
std::optional<int64_t> Resolver::auto_persistence_threshold(const std::string& key, const json& v) {
  auto h = hidden_size(key, v);
  if (!h) return std::nullopt;
  line(key, &v, str_format("parallel.zero.stage3_param_persistence_threshold = %lld (10 x hidden_size %lld)",
                           static_cast<long long>(10 * *h), static_cast<long long>(*h)));
  return 10 * *h;
}

}  // namespace deepspeed

int64_t model_hidden_size(const ModelConfig& model) {
  using deepspeed::find;
  using deepspeed::json;
  std::string file;
  if (!model.config.empty() && (model.init == ModelInit::kRandom || model.path.empty())) file = model.config;
  else if (!model.path.empty()) file = model.path + "/config.json";
  if (file.empty()) throw Error("neither model.config nor model.path names a config.json with hidden_size");
  const json config = read_user_json_file(file, "the model's config.json (for its hidden_size)");
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

}  // namespace shardtrain
