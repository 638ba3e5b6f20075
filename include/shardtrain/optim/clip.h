// Global-norm gradient clipping over flat gradient shards, as
// torch.nn.utils.clip_grad_norm_(parameters, max_norm) (L2 norm):
//
//   total_norm = sqrt(sum over every rank's shard of g^2)
//   clip_coef  = min(1, max_norm / (total_norm + 1e-6))
//   g         *= clip_coef
//
// Each rank computes local_sq_norm() of its shard (float64 accumulation, so
// the sum does not depend on how the buffer is sharded beyond float64
// rounding), the ranks sum the squares (all_reduce), and every rank applies the
// same coefficient. With DDP (full, already averaged gradients on every rank)
// call the forms without a Communicator; with ZeRO/FSDP shards pass the
// communicator of the ranks that together hold one copy of the gradients.
//
// max_norm <= 0 means "no clipping" (HF: max_grad_norm = 0 disables it); that
// is the caller's decision — clip_coefficient() requires max_norm > 0. The norm
// is still worth computing for logging (global_grad_norm()).
// Padding elements of a shard must be zero (they are: ZeRO pads with zeros).
#pragma once

#include <ATen/core/Tensor.h>

#include "shardtrain/comm/communicator.h"

namespace shardtrain {

// Sum of squares of all elements, accumulated in float64. Deterministic: the
// result does not depend on the number of threads.
double local_sq_norm(const at::Tensor& grads);

// sqrt of the sum over the ranks of `comm` of local_sq_norm(grads_shard).
// Collective over comm.
double global_grad_norm(const at::Tensor& grads_shard, Communicator& comm);

// min(1, max_norm / (total_norm + 1e-6)); max_norm must be > 0 (assertion).
// A non-finite total_norm gives a non-finite or zero coefficient, as in torch
// (error_if_nonfinite=False); loss-scaled runs skip such steps before clipping.
double clip_coefficient(double total_norm, double max_norm);

// grads *= clip_coefficient(total_norm, max_norm), the multiply done in the
// grads' dtype (torch multiplies by a float32 coefficient); no-op when the
// coefficient is 1.
void scale_grads(at::Tensor grads, double coefficient);

// Whole clip step on one rank's shard: global norm (collective over comm),
// coefficient, scale. Returns the global norm before clipping (what torch's
// clip_grad_norm_ returns and what trainers log).
double clip_grad_norm(at::Tensor grads_shard, double max_norm, Communicator& comm);
// Same for a full gradient buffer held by one process (no communication).
double clip_grad_norm(at::Tensor grads, double max_norm);

}  // namespace shardtrain
