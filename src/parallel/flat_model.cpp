#include "parallel/flat_model.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "shardtrain/core/check.h"
#include "shardtrain/model/unit_model.h"

namespace shardtrain {

std::vector<std::pair<std::string, at::Tensor>> trainable_parameters(const UnitModel& model, const std::string& who) {
  auto named = model.state_dict();
  ST_ASSERT(!named.empty(), who + ": the model has no parameters");
  for (const auto& entry : named)
    ST_ASSERT(entry.second.requires_grad(), who + ": parameter " + entry.first + " does not require grad");
  return named;
}

FlatModel flatten_model(UnitModel& model, int world_size, at::ScalarType dtype, const std::string& who) {
  FlatModel flat;
  auto named = trainable_parameters(model, who);
  flat.layout = std::make_unique<ParamLayout>(named);
  flat.padded_numel = flat.layout->padded_numel(world_size);
  std::vector<at::Tensor> tensors;
  for (auto& entry : named) tensors.push_back(entry.second.detach());
  const at::Device device = tensors.front().device();
  flat.params = flat.layout->flatten(tensors, flat.padded_numel).to(device, dtype);
  flat.grads = at::zeros_like(flat.params);
  at::NoGradGuard no_grad;
  const auto& slots = flat.layout->slots();
  for (size_t i = 0; i < slots.size(); ++i) {
    at::Tensor p = named[i].second;
    p.set_data(flat.params.narrow(0, slots[i].offset, slots[i].numel).view(slots[i].shape));
    p.mutable_grad() = flat.grads.narrow(0, slots[i].offset, slots[i].numel).view(slots[i].shape);
    flat.parameters.push_back(p);
  }
  return flat;
}

namespace {

class GradientReadyHook : public torch::autograd::FunctionPostHook {
 public:
  explicit GradientReadyHook(std::function<void()> ready) : ready_(std::move(ready)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    ready_();
    return outputs;
  }

 private:
  std::function<void()> ready_;
};

}  // namespace

GradientReadyHooks::GradientReadyHooks(const std::vector<at::Tensor>& parameters, std::function<void(size_t)> ready,
                                       const std::string& who) {
  auto shared_ready = std::make_shared<std::function<void(size_t)>>(std::move(ready));
  for (size_t i = 0; i < parameters.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(parameters[i]);
    ST_ASSERT(accumulator != nullptr, who + ": parameter " + std::to_string(i) + " has no gradient accumulator");
    const uintptr_t key =
        accumulator->add_post_hook(std::make_unique<GradientReadyHook>([shared_ready, i] { (*shared_ready)(i); }));
    hooks_.emplace_back(std::move(accumulator), key);
  }
}

GradientReadyHooks::~GradientReadyHooks() {
  for (auto& hook : hooks_) hook.first->del_post_hook(hook.second);
}

}  // namespace shardtrain
