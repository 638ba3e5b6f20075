// DeepSpeed's optimizer section -> train.lr, train.adam_beta1/2,
// train.adam_epsilon, train.weight_decay: only AdamW (or Adam in its AdamW
// mode) is shardtrain's optimizer (optim/adamw.h). The lr read here is kept
// for the scheduler section (deepspeed_scheduler.cpp), which may contradict it.
#include <algorithm>
#include <cctype>
#include <iterator>
#include <optional>
#include <string>

#include "config/deepspeed_resolver.h"

namespace shardtrain::deepspeed {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return std::tolower(ch); });
  return s;
}

}  // namespace

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
  const json* params = params_of("optimizer", *optimizer);
  if (!params) return;

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

}  // namespace shardtrain::deepspeed
