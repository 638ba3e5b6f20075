#include "parallel/shard_optimizer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "shardtrain/core/check.h"
#include "shardtrain/optim/clip.h"

namespace shardtrain {
namespace {

// Elements upcast at once for a master-copy step: bounds the float32 copy of
// the gradients (4 MB) instead of materialising the whole shard.
constexpr int64_t kMasterChunk = 1 << 20;

}  // namespace

StepDecision decide_step(double scaled_norm, const StepRequest& request) {
  ST_ASSERT(request.loss_scale > 0, "StepRequest::loss_scale must be > 0");
  StepDecision d;
  d.grad_norm = scaled_norm / request.loss_scale;
  if (request.loss_scale != 1.0 && !std::isfinite(d.grad_norm)) {
    d.apply = false;  // inf / NaN in some rank's gradients: skip, as GradScaler and DeepSpeed do
    return d;
  }
  const double clip = request.max_grad_norm > 0 ? clip_coefficient(d.grad_norm, request.max_grad_norm) : 1.0;
  d.grad_scale = clip / request.loss_scale;
  return d;
}

ShardOptimizer::ShardOptimizer(const at::Tensor& shard_params, const AdamWOptions& options, bool offload,
                               bool force_copies) {
  const at::TensorOptions fp32 = shard_params.options().dtype(at::kFloat);
  fp32_params_ = shard_params.scalar_type() == at::kFloat;
  if (offload && HostOptimizer::needed(shard_params, force_copies)) {
    host_ = std::make_unique<HostOptimizer>(shard_params, options, force_copies);
    return;
  }
  adamw_ = std::make_unique<AdamW>(shard_params.numel(), options, fp32);
  if (!fp32_params_) master_ = shard_params.to(at::kFloat);
}

at::Tensor ShardOptimizer::master() const {
  if (host_) return fp32_params_ ? at::Tensor() : host_->master();
  return master_;
}

void ShardOptimizer::load_master(const at::Tensor& shard_params) {
  if (host_) host_->load_master(shard_params);
  if (master_.defined()) master_.copy_(shard_params);
}

void ShardOptimizer::store_master(at::Tensor shard_params) {
  if (host_) host_->store_master(shard_params);
  if (master_.defined()) shard_params.copy_(master_);
}

void ShardOptimizer::step(at::Tensor shard_params, at::Tensor shard_grads, double grad_scale,
                          const std::vector<ElementRange>& decay_ranges, double lr) {
  if (host_) {
    host_->step(shard_params, grad_scale, decay_ranges, lr);
    return;
  }
  if (!master_.defined()) {
    scale_grads(shard_grads, grad_scale);
    adamw_->step(shard_params, shard_grads, decay_ranges, lr);
    return;
  }
  adamw_->begin_step();
  const int64_t n = master_.numel();
  for (int64_t begin = 0; begin < n; begin += kMasterChunk) {
    const int64_t count = std::min(kMasterChunk, n - begin);
    at::Tensor grads = shard_grads.narrow(0, begin, count).to(at::kFloat);
    scale_grads(grads, grad_scale);
    at::Tensor master = master_.narrow(0, begin, count);
    adamw_->step_span(master, grads, begin, decay_ranges, lr);
    shard_params.narrow(0, begin, count).copy_(master);
  }
}

void ShardOptimizer::count(StrategyMemory& memory) const {
  memory.optimizer_bytes += 2 * adamw().numel() * 4;
  if (master_.defined()) memory.optimizer_bytes += master_.numel() * 4;
  if (host_) host_->count(memory);
}

}  // namespace shardtrain
