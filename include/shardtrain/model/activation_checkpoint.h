// Activation checkpointing (HF's gradient_checkpointing, torch.utils.checkpoint;
// docs/DESIGN.md, "Activation checkpointing"): run a block's forward without
// keeping what backward needs, keep only its input, and run the forward again
// inside backward to get its gradients.
//
//   hidden = checkpointed_forward([=](const at::Tensor& x) { return layer->forward(x, mask); },
//                                 hidden, layer->parameters());
//
// Exactness: the recomputation sees the same input, parameters and random
// numbers (the CPU generator's state, and the input's device generator's, are
// saved before the forward and restored around the recomputation, as
// torch.utils.checkpoint's preserve_rng_state does), so dropout masks and
// therefore gradients equal the plain run's.
//
// Gradients reach the parameters through their usual AccumulateGrad nodes
// (the graph's edges go from the checkpoint's node to each parameter), so the
// strategies' gradient hooks fire as without checkpointing. A sharded strategy
// gathers the block's parameters again for the recomputation: its
// pre-backward hook on the block's output runs before this node.
//
// Outside autograd (eval, no_grad, nothing requiring a gradient) it is a plain
// call of `forward`.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

namespace shardtrain {

using BlockForward = std::function<at::Tensor(const at::Tensor&)>;

// `params`: the tensors `forward` reads that may need gradients (its module's
// parameters). Tensors it captures by value (a mask) get no gradient.
at::Tensor checkpointed_forward(const BlockForward& forward, const at::Tensor& input,
                                const std::vector<at::Tensor>& params);

}  // namespace shardtrain
