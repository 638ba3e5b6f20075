// Private to src/parallel: a model's parameters in flat buffers, and the
// autograd hook that says when a parameter's gradient is complete.
//
//   FlatModel           the model's parameters moved into one flat parameter
//                       buffer and one flat gradient buffer (param_layout.h
//                       order, padded to a multiple of the world size); the
//                       module's parameters and their .grad are views into
//                       them (DDP and ZeRO-1).
//   GradientReadyHooks  a post-hook on every parameter's gradient
//                       accumulator: ready(i) once autograd has accumulated
//                       parameter i's gradient in a backward pass.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "shardtrain/optim/param_layout.h"

namespace torch {
namespace autograd {
struct Node;
}
}  // namespace torch

namespace shardtrain {

class UnitModel;

struct FlatModel {
  std::unique_ptr<ParamLayout> layout;
  int64_t padded_numel = 0;
  at::Tensor params;                   // [padded_numel], the padding zero
  at::Tensor grads;                    // [padded_numel], zeros
  std::vector<at::Tensor> parameters;  // the module's parameters, layout order
};

// Moves the model's parameters (values kept, converted to `dtype`) into new
// flat buffers of that dtype padded for `world_size` ranks. `who` names the
// strategy in assertion messages.
FlatModel flatten_model(UnitModel& model, int world_size, at::ScalarType dtype, const std::string& who);

// The model's parameters in order, each checked to require grad (`who` names
// the strategy in the assertion message).
std::vector<std::pair<std::string, at::Tensor>> trainable_parameters(const UnitModel& model, const std::string& who);

class GradientReadyHooks {
 public:
  GradientReadyHooks(const std::vector<at::Tensor>& parameters, std::function<void(size_t)> ready,
                     const std::string& who);
  ~GradientReadyHooks();  // removes the hooks
  GradientReadyHooks(const GradientReadyHooks&) = delete;
  GradientReadyHooks& operator=(const GradientReadyHooks&) = delete;

 private:
  // The gradient accumulators must stay alive: a leaf holds its accumulator
  // weakly, so a new one (without our hook) would be made for each backward.
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>> hooks_;
};

}  // namespace shardtrain
