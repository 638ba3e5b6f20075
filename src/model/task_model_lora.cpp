// TaskModel's LoRA adapters (model/task_model.h, model/lora.h;
// docs/DESIGN.md, "LoRA"): adding them, freezing the base, merging them.
#include <ATen/ATen.h>

#include "model/task_model_impl.h"

namespace shardtrain {

void TaskModel::add_lora(const LoraSpec& lora, uint64_t seed) {
  Impl& m = *impl_;
  if (m.lora) throw Error("add_lora: this model has a LoRA adapter already");
  std::vector<ParameterSpec> adapters;
  for (ParameterSpec& p : lora_trainable_plan(m.config, lora))
    if (p.lora != LoraPart::kNone) adapters.push_back(std::move(p));
  // Each adapter goes after its module's last parameter (lora_trainable_plan's order).
  std::unordered_map<std::string, std::vector<size_t>> after;
  for (size_t a = 0; a < adapters.size(); ++a) {
    const std::string module = adapters[a].name.substr(0, adapters[a].name.rfind(".lora_"));
    const std::string last = m.index.count(module + ".bias") ? module + ".bias" : module + ".weight";
    after[last].push_back(a);
  }
  std::vector<ParameterSpec> plan;
  std::vector<at::Tensor> tensors;
  std::vector<char> frozen;
  for (size_t i = 0; i < m.plan.size(); ++i) {
    const ParameterSpec& spec = m.plan[i];
    at::Tensor& t = m.tensors[i];
    const bool freeze = spec.trainable && !lora.saves(spec.name);
    if (freeze) {
      t.mutable_grad() = at::Tensor();
      t.set_requires_grad(false);
    }
    plan.push_back(spec);
    tensors.push_back(t);
    frozen.push_back(freeze);
    const auto found = after.find(spec.name);
    if (found == after.end()) continue;
    for (size_t a : found->second) {
      const ParameterSpec& adapter = adapters[a];
      at::Tensor values = at::empty(adapter.shape, at::TensorOptions().dtype(at::kFloat));
      detail::init_parameter(adapter, values, seed);
      at::Tensor tensor = values.to(t.device(), t.scalar_type()).detach();
      tensor.set_requires_grad(true);
      detail::UnitWeights& w = m.units[static_cast<size_t>(adapter.unit)];
      (adapter.lora == LoraPart::kA ? w.lora_a : w.lora_b)[static_cast<size_t>(adapter.slot)] = tensor;
      plan.push_back(adapter);
      tensors.push_back(tensor);
      frozen.push_back(false);
    }
  }
  for (detail::UnitWeights& w : m.units) {
    w.lora_scaling = lora.scaling();
    w.lora_dropout = lora.dropout;
  }
  m.plan = std::move(plan);
  m.tensors = std::move(tensors);
  m.frozen = std::move(frozen);
  m.reindex();
  m.lora = std::make_unique<LoraSpec>(lora);
}

int64_t TaskModel::plan_unit_of(const std::string& name) const {
  const auto found = impl_->index.find(name);
  if (found == impl_->index.end())
    throw Error("'" + name + "' is not a tensor of this " + impl_->config.model_type + " model");
  return impl_->plan[found->second].unit;
}

const LoraSpec* TaskModel::lora() const { return impl_->lora.get(); }

std::vector<std::pair<std::string, at::Tensor>> TaskModel::frozen_state_dict() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (size_t i = 0; i < impl_->plan.size(); ++i)
    if (impl_->is_frozen(i)) out.emplace_back(impl_->plan[i].name, impl_->tensors[i]);
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> TaskModel::all_tensors() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (size_t i = 0; i < impl_->plan.size(); ++i) out.emplace_back(impl_->plan[i].name, impl_->tensors[i]);
  return out;
}

void TaskModel::frozen_to(at::ScalarType dtype) {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < impl_->plan.size(); ++i)
    if (impl_->is_frozen(i)) impl_->tensors[i].set_data(impl_->tensors[i].to(dtype));
}

void TaskModel::merge_lora() {
  Impl& m = *impl_;
  if (!m.lora) return;
  at::NoGradGuard no_grad;
  const double scaling = m.lora->scaling();
  std::vector<ParameterSpec> plan;
  std::vector<at::Tensor> tensors;
  for (size_t i = 0; i < m.plan.size(); ++i) {
    const ParameterSpec& spec = m.plan[i];
    if (spec.lora == LoraPart::kB) continue;
    if (spec.lora == LoraPart::kA) {
      detail::UnitWeights& w = m.units[static_cast<size_t>(spec.unit)];
      const size_t slot = static_cast<size_t>(spec.slot);
      at::Tensor& weight = w.by_slot[slot];
      const at::Tensor delta = at::matmul(w.lora_b[slot].to(at::kDouble), w.lora_a[slot].to(at::kDouble)) * scaling;
      weight.set_data((weight.to(at::kDouble) + delta.to(weight.device())).to(weight.scalar_type()));
      w.lora_a[slot] = at::Tensor();
      w.lora_b[slot] = at::Tensor();
      continue;
    }
    if (m.is_frozen(i)) m.tensors[i].set_requires_grad(true);
    plan.push_back(spec);
    tensors.push_back(m.tensors[i]);
  }
  m.plan = std::move(plan);
  m.tensors = std::move(tensors);
  m.frozen.clear();
  m.reindex();
  m.lora.reset();
}

}  // namespace shardtrain
