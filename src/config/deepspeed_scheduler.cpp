// DeepSpeed's scheduler section -> train.lr_scheduler_type (the DeepSpeed type
// name) and train.lr_scheduler_kwargs.*, warmup_max_lr -> train.lr,
// warmup_num_steps -> train.warmup_steps. Absent params take DeepSpeed's
// defaults (lr_schedules.py); "auto" is filled as transformers'
// HfTrainerDeepSpeedConfig fills it. optim/schedule.h computes the schedule.
// A warmup_max_lr that differs from optimizer.params.lr (deepspeed_optimizer.cpp)
// is refused: DeepSpeed would silently train with warmup_max_lr.
#include <cstring>
#include <optional>
#include <string>

#include "config/deepspeed_resolver.h"

namespace shardtrain::deepspeed {

namespace {

// The params of each type: W WarmupLR, D WarmupDecayLR, C WarmupCosineLR.
struct SchedulerParam {
  const char* name;
  const char* types;
};
const SchedulerParam kSchedulerParams[] = {
    {"warmup_min_lr", "WD"},  {"warmup_max_lr", "WD"},   {"warmup_num_steps", "WDC"},
    {"warmup_type", "WDC"},   {"total_num_steps", "DC"}, {"warmup_min_ratio", "C"},
    {"cos_min_ratio", "C"},   {"last_batch_iteration", "WDC"}};

// Whether the type `letter` has the param `name`.
bool scheduler_reads(const char* name, char letter) {
  for (const SchedulerParam& p : kSchedulerParams)
    if (std::string(name) == p.name) return std::strchr(p.types, letter) != nullptr;
  return false;
}

std::string scheduler_key(const char* name) { return std::string("scheduler.params.") + name; }

}  // namespace

void Resolver::resolve_scheduler(const json* scheduler) {
  if (!scheduler) {
    line("scheduler", nullptr, "train.lr_scheduler_type = " + text(c_.train.lr_scheduler_type) +
                                   " from the run config, as with a transformers scheduler under Accelerate");
    return;
  }
  if (!object("scheduler", *scheduler)) return;
  const json* type = find(*scheduler, "type");
  const std::string type_name = type && type->is_string() ? type->get<std::string>() : "";
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
  const json* params = params_of("scheduler", *scheduler);
  if (!params) return;
  std::string names;
  for (const SchedulerParam& p : kSchedulerParams)
    if (std::strchr(p.types, letter)) names += std::string(names.empty() ? "" : ", ") + p.name;
  for (const auto& item : params->items()) {
    const SchedulerParam* known = nullptr;
    for (const SchedulerParam& p : kSchedulerParams)
      if (item.key() == p.name && std::strchr(p.types, letter)) known = &p;
    if (!known)
      problem("scheduler.params." + item.key(), &item.value(),
              "not a " + type_name + " parameter (it has " + names + ")");
  }
  resolve_scheduler_numbers(params, letter);
  resolve_scheduler_steps(params, type_name, letter);
}

// warmup_min_lr, warmup_max_lr (train.lr), warmup_min_ratio and cos_min_ratio.
void Resolver::resolve_scheduler_numbers(const json* params, char letter) {
  LrSchedulerKwargs& k = c_.train.lr_scheduler_kwargs;
  const std::string kw = "train.lr_scheduler_kwargs.";
  auto key_of = scheduler_key;
  auto reads = [&](const char* name) { return scheduler_reads(name, letter); };
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
}

// warmup_num_steps, warmup_type, total_num_steps and last_batch_iteration.
void Resolver::resolve_scheduler_steps(const json* params, const std::string& type_name, char letter) {
  LrSchedulerKwargs& k = c_.train.lr_scheduler_kwargs;
  const std::string kw = "train.lr_scheduler_kwargs.";
  auto key_of = scheduler_key;
  auto reads = [&](const char* name) { return scheduler_reads(name, letter); };
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
    if (v) value = v->is_string() ? find_enum<WarmupType>(v->get<std::string>()) : std::nullopt;
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

}  // namespace shardtrain::deepspeed
