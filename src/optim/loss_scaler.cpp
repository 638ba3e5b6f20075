#include "shardtrain/optim/loss_scaler.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>

#include "shardtrain/core/check.h"

namespace shardtrain {

LossScalerOptions LossScalerOptions::grad_scaler() { return LossScalerOptions{}; }

LossScalerOptions LossScalerOptions::deepspeed(int initial_scale_power, int64_t loss_scale_window,
                                               int64_t hysteresis, double min_loss_scale,
                                               bool consecutive_hysteresis) {
  LossScalerOptions o;
  o.init_scale = std::ldexp(1.0, initial_scale_power);
  o.growth_factor = 2.0;  // DeepSpeed's scale_factor, used both ways
  o.backoff_factor = 0.5;
  o.growth_interval = loss_scale_window;
  o.hysteresis = hysteresis;
  o.consecutive_hysteresis = consecutive_hysteresis;
  o.min_scale = min_loss_scale;
  return o;
}

DynamicLossScaler::DynamicLossScaler(const LossScalerOptions& options) : options_(options) {
  auto bad = [](const std::string& what) { throw Error("loss scaler: " + what); };
  if (!(options.init_scale > 0 && std::isfinite(options.init_scale)))
    bad("initial scale must be finite and > 0, got " + std::to_string(options.init_scale));
  if (!(options.growth_factor > 1)) bad("growth factor must be > 1, got " + std::to_string(options.growth_factor));
  if (!(options.backoff_factor > 0 && options.backoff_factor < 1))
    bad("backoff factor must be in (0, 1), got " + std::to_string(options.backoff_factor));
  if (options.growth_interval < 1)
    bad("growth interval (loss_scale_window) must be >= 1, got " + std::to_string(options.growth_interval));
  if (options.hysteresis < 1) bad("hysteresis must be >= 1, got " + std::to_string(options.hysteresis));
  if (!(options.min_scale >= 0)) bad("min_loss_scale must be >= 0, got " + std::to_string(options.min_scale));
  state_.scale = options.init_scale;
  state_.hysteresis_left = options.hysteresis;
}

double DynamicLossScaler::inv_scale() const { return static_cast<double>(static_cast<float>(1.0 / state_.scale)); }

bool DynamicLossScaler::update(bool found_inf) {
  if (!options_.dynamic) {
    if (found_inf) ++state_.num_skipped_steps;
    return !found_inf;
  }
  if (found_inf) {
    ++state_.num_skipped_steps;
    state_.good_steps = 0;
    if (state_.hysteresis_left > 1) {
      --state_.hysteresis_left;
    } else {
      if (options_.error_at_min_scale && state_.scale <= options_.min_scale)
        throw Error("loss scale is already at min_loss_scale (" + std::to_string(options_.min_scale) +
                    ") and the gradients still overflow: lower the learning rate or train in bf16/fp32");
      state_.scale = std::max(state_.scale * options_.backoff_factor, options_.min_scale);
    }
    return false;
  }
  ++state_.good_steps;
  if (options_.consecutive_hysteresis) state_.hysteresis_left = options_.hysteresis;
  if (state_.good_steps == options_.growth_interval) {
    // GradScaler keeps the old scale if growing would overflow float32.
    const double grown = state_.scale * options_.growth_factor;
    if (std::isfinite(static_cast<float>(grown))) state_.scale = grown;
    state_.good_steps = 0;
    state_.hysteresis_left = options_.hysteresis;
  }
  return true;
}

void DynamicLossScaler::load_state(const LossScalerState& state) {
  if (!(state.scale > 0 && std::isfinite(state.scale)) || state.good_steps < 0 || state.hysteresis_left < 1 ||
      state.num_skipped_steps < 0)
    throw Error("loss scaler: checkpoint state is invalid (scale " + std::to_string(state.scale) +
                ", good_steps " + std::to_string(state.good_steps) + ", hysteresis_left " +
                std::to_string(state.hysteresis_left) + ")");
  state_ = state;
}

bool found_inf(const at::Tensor& grads) {
  if (grads.numel() == 0) return false;
  if (grads.device().is_cpu() && grads.scalar_type() == at::kFloat && grads.is_contiguous()) {
    const float* x = grads.data_ptr<float>();
    std::atomic<bool> any{false};
    at::parallel_for(0, grads.numel(), 1 << 16, [&](int64_t begin, int64_t end) {
      // x - x is 0 for finite x and NaN for inf/NaN; an integer OR of the test
      // vectorizes (a float sum would not, without reassociation).
      int bad = 0;
      for (int64_t i = begin; i < end; ++i) bad |= (x[i] - x[i] != 0.0f);
      if (bad) any.store(true, std::memory_order_relaxed);
    });
    return any.load();
  }
  return !at::isfinite(grads).all().item<bool>();
}

bool found_inf_any_rank(const at::Tensor& grads_shard, Communicator& comm) {
  at::Tensor flag = at::full({1}, found_inf(grads_shard) ? 1.0f : 0.0f, at::TensorOptions().dtype(at::kFloat));
  if (!grads_shard.device().is_cpu()) flag = flag.to(grads_shard.device());
  comm.all_reduce(flag, ReduceOp::kMax);
  return flag.item<float>() != 0.0f;
}

void unscale(at::Tensor grads, double scale) {
  ST_ASSERT(scale > 0, "unscale by a non-positive loss scale");
  grads.mul_(static_cast<double>(static_cast<float>(1.0 / scale)));
}

}  // namespace shardtrain
