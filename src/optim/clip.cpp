#include "shardtrain/optim/clip.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "shardtrain/core/check.h"

namespace shardtrain {
namespace {

// Fixed blocks, partial sums added in block order: the result is the same for
// any thread count (at::parallel_reduce would split by thread count).
constexpr int64_t kBlock = 1 << 16;

template <class T>
double block_sq_sum(const T* x, int64_t n) {
  // Eight independent accumulators break the add latency chain.
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) {
      const double value = static_cast<float>(x[i + k]);
      acc[k] += value * value;
    }
  for (; i < n; ++i) {
    const double value = static_cast<float>(x[i]);
    acc[0] += value * value;
  }
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

template <class T>
double blocked_sq_sum(const T* x, int64_t n) {
  const int64_t num_blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(num_blocks), 0.0);
  at::parallel_for(0, num_blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t begin = b * kBlock;
      partial[static_cast<size_t>(b)] = block_sq_sum(x + begin, std::min(kBlock, n - begin));
    }
  });
  double total = 0.0;
  for (double value : partial) total += value;
  return total;
}

}  // namespace

double local_sq_norm(const at::Tensor& grads) {
  if (grads.numel() == 0) return 0.0;
  if (grads.device().is_cpu() && grads.is_contiguous()) {
    // float32 and the 16-bit formats without a copy (mixed precision's gradients).
    switch (grads.scalar_type()) {
      case at::kFloat: return blocked_sq_sum(grads.data_ptr<float>(), grads.numel());
      case at::kBFloat16: return blocked_sq_sum(grads.data_ptr<c10::BFloat16>(), grads.numel());
      case at::kHalf: return blocked_sq_sum(grads.data_ptr<c10::Half>(), grads.numel());
      default: break;
    }
  }
  // Other devices / dtypes: float64 reduction by ATen (a float64 copy of the input).
  return grads.to(at::kDouble).square().sum().item<double>();
}

double global_grad_norm(const at::Tensor& grads_shard, Communicator& comm) {
  at::Tensor sq = at::full({1}, local_sq_norm(grads_shard), at::TensorOptions().dtype(at::kDouble));
  if (!grads_shard.device().is_cpu()) sq = sq.to(grads_shard.device());
  comm.all_reduce(sq, ReduceOp::kSum);
  return std::sqrt(sq.item<double>());
}

double clip_coefficient(double total_norm, double max_norm) {
  ST_ASSERT(max_norm > 0, "clip_coefficient needs max_norm > 0 (max_norm <= 0 means: do not clip)");
  return std::min(1.0, max_norm / (total_norm + 1e-6));
}

void scale_grads(at::Tensor grads, double coefficient) {
  if (coefficient == 1.0) return;
  grads.mul_(coefficient);
}

double clip_grad_norm(at::Tensor grads_shard, double max_norm, Communicator& comm) {
  const double total_norm = global_grad_norm(grads_shard, comm);
  scale_grads(grads_shard, clip_coefficient(total_norm, max_norm));
  return total_norm;
}

double clip_grad_norm(at::Tensor grads, double max_norm) {
  const double total_norm = std::sqrt(local_sq_norm(grads));
  scale_grads(grads, clip_coefficient(total_norm, max_norm));
  return total_norm;
}

}  // namespace shardtrain
