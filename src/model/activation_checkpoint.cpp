#include "shardtrain/model/activation_checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/core/Generator.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>

#include <mutex>
#include <string>
#include <utility>

#include "shardtrain/core/check.h"

namespace shardtrain {
namespace {

// The generators a block's dropout may draw from: the CPU one always, and the
// input's device's when it is not the CPU.
struct RngStates {
  at::Tensor cpu;
  at::Tensor device;
  at::Device device_type = at::kCPU;

  static at::Generator generator(const at::Device& device) {
    return at::globalContext().defaultGenerator(device);
  }
  static at::Tensor get(const at::Device& device) {
    at::Generator g = generator(device);
    std::lock_guard<std::mutex> lock(g.mutex());
    return g.get_state();
  }
  static void set(const at::Device& device, const at::Tensor& state) {
    at::Generator g = generator(device);
    std::lock_guard<std::mutex> lock(g.mutex());
    g.set_state(state);
  }

  static RngStates capture(const at::Device& device) {
    RngStates s;
    s.cpu = get(at::kCPU);
    s.device_type = device;
    if (!device.is_cpu()) s.device = get(device);
    return s;
  }
  void restore() const {
    set(at::kCPU, cpu);
    if (!device_type.is_cpu()) set(device_type, device);
  }
};

// Backward of a checkpointed block: inputs (gradients of) its output; outputs
// the gradients of its input and of each parameter, in the order of its
// next edges.
struct CheckpointBackward : public torch::autograd::Node {
  BlockForward forward;
  at::Tensor input;  // detached; the only activation kept
  bool input_requires_grad = false;
  std::vector<at::Tensor> params;
  RngStates rng;

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    ST_ASSERT(input.defined(), "activation checkpoint: backward ran twice (retain_graph is not supported)");
    at::Tensor x = input.detach().requires_grad_(input_requires_grad);
    at::Tensor output;
    {
      // The recomputation draws the forward's random numbers; the caller's
      // generators go on from where they were.
      const RngStates now = RngStates::capture(rng.device_type);
      rng.restore();
      at::AutoGradMode grad(true);
      output = forward(x);
      now.restore();
    }
    std::vector<at::Tensor> wanted;
    std::vector<size_t> where;  // index in this node's outputs
    if (input_requires_grad) {
      wanted.push_back(x);
      where.push_back(0);
    }
    for (size_t k = 0; k < params.size(); ++k)
      if (params[k].requires_grad()) {
        wanted.push_back(params[k]);
        where.push_back(k + 1);
      }
    torch::autograd::variable_list out(params.size() + 1);
    if (!wanted.empty() && grads[0].defined()) {
      const torch::autograd::variable_list computed =
          torch::autograd::grad({output}, wanted, {grads[0]}, /*retain_graph=*/false, /*create_graph=*/false,
                                /*allow_unused=*/true);
      for (size_t k = 0; k < computed.size(); ++k) out[where[k]] = computed[k];
    }
    release_variables();
    return out;
  }

  std::string name() const override { return "shardtrain::CheckpointBackward"; }
  void release_variables() override {
    input = at::Tensor();
    forward = nullptr;
  }
};

}  // namespace

at::Tensor checkpointed_forward(const BlockForward& forward, const at::Tensor& input,
                                const std::vector<at::Tensor>& params) {
  bool any_grad = input.requires_grad();
  for (const at::Tensor& p : params) any_grad = any_grad || p.requires_grad();
  if (!at::GradMode::is_enabled() || !any_grad) return forward(input);

  auto node = std::shared_ptr<CheckpointBackward>(new CheckpointBackward(), torch::autograd::deleteNode);
  node->rng = RngStates::capture(input.device());
  at::Tensor output;
  {
    at::NoGradGuard no_grad;
    output = forward(input);
  }
  node->forward = forward;
  node->input = input.detach();
  node->input_requires_grad = input.requires_grad();
  node->params = params;
  node->set_next_edges(torch::autograd::collect_next_edges(input, at::TensorList(params)));
  torch::autograd::create_gradient_edge(output, node);
  return output;
}

}  // namespace shardtrain
