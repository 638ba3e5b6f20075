// HF's ACT2FN activations by name (transformers/activations.py).
#include <ATen/ATen.h>

#include <cmath>

#include "shardtrain/core/check.h"
#include "shardtrain/model/task_model.h"

namespace shardtrain {

at::Tensor apply_activation(const std::string& name, const at::Tensor& x) {
  if (name == "gelu" || name == "gelu_python") return at::gelu(x);
  if (name == "gelu_pytorch_tanh") return at::gelu(x, "tanh");
  if (name == "gelu_new" || name == "gelu_accurate") {
    const double k = std::sqrt(2.0 / 3.14159265358979323846);
    return 0.5 * x * (1.0 + at::tanh(k * (x + 0.044715 * at::pow(x, 3.0))));
  }
  if (name == "gelu_fast") return 0.5 * x * (1.0 + at::tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x)));
  if (name == "quick_gelu") return x * at::sigmoid(1.702 * x);
  if (name == "gelu_10") return at::clamp(at::gelu(x), -10.0, 10.0);
  if (name == "relu") return at::relu(x);
  if (name == "relu2") return at::square(at::relu(x));
  if (name == "relu6") return at::hardtanh(x, 0.0, 6.0);
  if (name == "leaky_relu") return at::leaky_relu(x, 0.01);
  if (name == "silu" || name == "swish") return at::silu(x);
  if (name == "mish") return at::mish(x);
  if (name == "tanh") return at::tanh(x);
  if (name == "sigmoid") return at::sigmoid(x);
  if (name == "linear") return x;
  if (name == "laplace") return 0.5 * (1.0 + at::erf((x - 0.707107) / (0.282095 * std::sqrt(2.0))));
  throw Error("unsupported activation \"" + name +
              "\" (model config: hidden_act / activation / hidden_activation / classifier_activation)");
}

}  // namespace shardtrain
