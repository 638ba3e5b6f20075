// Dynamic loss scaling for fp16 training, with the semantics of
// torch.cuda.amp.GradScaler and, through options, DeepSpeed's
// DynamicLossScaler (fp16.loss_scale_window / hysteresis / min_loss_scale).
//
// Per optimizer step:
//   1. backward on loss * scale()
//   2. inf = found_inf_any_rank(grads_shard, comm)   (every rank gets the same answer)
//   3. if (!inf) unscale(grads, scale()), clip, optimizer step
//   4. update(inf)                                  (a step with inf is skipped)
//
// update(found_inf):
//   found_inf: good_steps = 0; if hysteresis_left > 1: hysteresis_left -= 1
//              else scale = max(scale * backoff_factor, min_scale)
//   else:      good_steps += 1; if consecutive_hysteresis: hysteresis_left = hysteresis
//              if good_steps == growth_interval: scale *= growth_factor (kept only if finite),
//                 good_steps = 0, hysteresis_left = hysteresis
// With hysteresis = 1 and min_scale = 0 (LossScalerOptions{} / grad_scaler())
// this is exactly GradScaler's _amp_update_scale_ (growth_tracker = good_steps);
// deepspeed() gives DeepSpeed's update_scale: its "(cur_iter - last_overflow_iter)
// % scale_window == 0" is the same as counting good steps since the last
// overflow and restarting the count at each growth.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "shardtrain/comm/communicator.h"

namespace shardtrain {

struct LossScalerOptions {
  double init_scale = 65536.0;  // GradScaler init_scale; DeepSpeed 2^initial_scale_power
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;  // DeepSpeed loss_scale_window
  int64_t hysteresis = 1;          // overflows absorbed before a backoff (1 = none; DeepSpeed default 2)
  bool consecutive_hysteresis = false;  // DeepSpeed: refill hysteresis on every good step
  double min_scale = 0.0;          // DeepSpeed min_loss_scale; GradScaler has no floor
  bool error_at_min_scale = false;  // DeepSpeed raise_error_at_min_scale: overflow at min_scale throws
  // false: a static scale (DeepSpeed loss_scale > 0): overflowing steps are
  // still skipped and counted, the scale never changes.
  bool dynamic = true;

  // torch.cuda.amp.GradScaler() defaults.
  static LossScalerOptions grad_scaler();
  // DeepSpeed fp16 section ("loss_scale": 0 = dynamic) with its defaults.
  static LossScalerOptions deepspeed(int initial_scale_power = 16, int64_t loss_scale_window = 1000,
                                     int64_t hysteresis = 2, double min_loss_scale = 1.0,
                                     bool consecutive_hysteresis = false);
};

// Everything update() changes; saved in checkpoints ("loss scale" attributes).
struct LossScalerState {
  double scale = 65536.0;
  int64_t good_steps = 0;       // GradScaler's growth_tracker
  int64_t hysteresis_left = 1;  // DeepSpeed's cur_hysteresis
  int64_t num_skipped_steps = 0;
};

class DynamicLossScaler {
 public:
  // Throws shardtrain::Error for options that cannot work (scale <= 0,
  // growth_factor <= 1, backoff_factor outside (0, 1), interval or hysteresis < 1).
  explicit DynamicLossScaler(const LossScalerOptions& options = {});

  double scale() const { return state_.scale; }
  // GradScaler's inv_scale: 1/scale computed in float64, used as float32.
  double inv_scale() const;

  // Updates the scale after a step (see the file comment). Returns true when
  // the optimizer step should be applied, i.e. !found_inf. Throws
  // shardtrain::Error when error_at_min_scale and an overflow hits min_scale.
  bool update(bool found_inf);

  const LossScalerOptions& options() const { return options_; }
  const LossScalerState& state() const { return state_; }
  void load_state(const LossScalerState& state);

 private:
  LossScalerOptions options_;
  LossScalerState state_;
};

// True if any element of grads is inf or NaN (this process only).
bool found_inf(const at::Tensor& grads);
// The OR of found_inf over the ranks of comm (an all_reduce max). Collective.
bool found_inf_any_rank(const at::Tensor& grads_shard, Communicator& comm);
// grads *= float(1 / scale), like GradScaler.unscale_.
void unscale(at::Tensor grads, double scale);

}  // namespace shardtrain
