// Dropout for the classifiers' training mode (model/task_model.h).
//
//   y = dropout(x, p, training);   // x * noise; noise = 0 with probability p, else 1 / (1 - p)
//
// The math of at::dropout (torch.nn.functional.dropout): the same noise values
// and the same product, so gradients are grad * noise. What differs is how the
// mask is drawn. at::dropout on the CPU calls bernoulli_, which draws one
// element at a time from mt19937 on a single thread: about 10 ns per element,
// and a bert-base step at batch 16 drops ~31 M elements (attention
// probabilities and hidden states), a tenth of the step on 2 cores. Here the
// mask comes from a counter-based generator: element pair i takes the bits of
// SplitMix64(seed + i * golden gamma), in parallel over the intra-op threads.
// The seed is one 64-bit draw from torch's default CPU generator per call, so
// at::manual_seed() makes the masks reproducible, and they do not depend on
// the thread count. Keep probability 1 - p is applied as a 32-bit threshold
// (p exact to 2^-32). CPU bfloat16/float16 tensors get the float32 mask, cast
// (the masks of the fp32 run); tensors on other devices use at::dropout.
#pragma once

#include <ATen/core/Tensor.h>

namespace shardtrain {

// x unchanged when !training or p == 0; else x * dropout_noise(x, p).
at::Tensor dropout(const at::Tensor& x, double p, bool training);

// A new tensor shaped and typed like `like` (contiguous): 0 with probability
// p, else 1 / (1 - p). 0 <= p < 1. Equal to
// dropout_noise_slice(dropout_seed(), 0, like.sizes(), ...).
at::Tensor dropout_noise(const at::Tensor& like, double p);

// The pieces of dropout_noise, for a kernel that draws a large mask a block at
// a time and draws the same block again in backward (model attention): one
// seed from torch's default CPU generator, and the elements
// [first, first + numel(sizes)) of the flat, contiguous noise that seed gives,
// shaped `sizes`. Equal, element for element, to the matching range of
// dropout_noise(like, p) had that call drawn `seed`.
uint64_t dropout_seed();
at::Tensor dropout_noise_slice(uint64_t seed, int64_t first, at::IntArrayRef sizes, double p,
                               at::ScalarType dtype);

}  // namespace shardtrain
