// AdamW over one flat fp32 buffer (all parameters, or one rank's shard of them).
//
// Strategies own flat buffers: every parameter concatenated in one contiguous
// 1-D tensor (param_layout.h gives the layout), gradients in a matching flat
// buffer. AdamW keeps its two moment buffers with the same numel and updates
// the whole buffer in one call. Because every operation is elementwise, a rank
// that steps only its shard [begin, end) gets bit-identical values to stepping
// the whole buffer and slicing (tests/test_optim_mpi.cpp proves it).
//
// Semantics are torch.optim.AdamW (PyTorch 1.13 `_single_tensor_adamw`, no
// amsgrad, no maximize), with the same operation order and the same fp32
// rounding of each scalar coefficient:
//
//   t    += 1
//   p    *= 1 - lr * wd                                  (decayed elements only)
//   m     = m * beta1 + (1 - beta1) * g
//   v     = v * beta2 + ((1 - beta2) * g) * g
//   bc1   = 1 - beta1^t,  bc2 = 1 - beta2^t              (float64)
//   denom = sqrt(v) / sqrt(bc2) + eps
//   p     = p + ((-lr / bc1) * m) / denom
//
// Two kernels compute it:
//   kFusedCpu  one pass over contiguous CPU float32 buffers (at::parallel_for
//              over chunks): reads p, g, m, v and writes p, m, v once each.
//   kAtenOps   in-place ATen ops (mul_, add_, addcmul_, sqrt, div, addcdiv_)
//              on the flat tensors: any device and dtype (CUDA uses this).
// kAuto picks kFusedCpu for contiguous CPU float32, kAtenOps otherwise. The
// kernels agree to fp32 rounding, not bit for bit: PyTorch's AVX2 `add_`
// (alpha) is a fused multiply-add and the fused loop is not, so the two may
// differ by one ulp in m per step (tests bound the difference).
//
// Weight decay: `decay_ranges` lists the half-open element ranges [begin, end)
// of the buffer passed to step() that get decoupled weight decay (HF's rule:
// everything except biases and LayerNorm weights). Ranges are sorted, disjoint,
// and relative to the start of `params` — for a shard use
// ParamLayout::decay_ranges_in(shard_range(...)). Elements outside every range
// are not decayed (exactly torch's weight_decay = 0 group: p * 1 == p).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace shardtrain {

// A half-open range [begin, end) of element indices in a flat buffer.
struct ElementRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const ElementRange& other) const { return begin == other.begin && end == other.end; }
};

// Hyper-parameters; defaults are torch.optim.AdamW's except weight_decay,
// which is HF TrainingArguments'/run_glue's usual 0.01.
struct AdamWOptions {
  double lr = 2e-5;  // the base lr; step() takes the scheduled lr of each step
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

class AdamW {
 public:
  enum class Kernel { kAuto, kFusedCpu, kAtenOps };

  // State for a buffer of `numel` elements: exp_avg and exp_avg_sq zeros of
  // dtype float32 on `device` (the device and dtype the params will have),
  // step_count 0. Throws shardtrain::Error for bad hyper-parameters
  // (betas outside [0, 1), eps < 0, weight_decay < 0, lr < 0).
  AdamW(int64_t numel, const AdamWOptions& options, at::TensorOptions state_options = {});

  // One optimizer step with learning rate `lr` (the schedule's value for this
  // step). params, grads: 1-D, contiguous, numel() elements, same device and
  // dtype as the state. decay_ranges: see the file comment.
  // grad_scale: the step uses grads * grad_scale (fp32 product) and leaves
  // grads as they are. Passing clip_coefficient() (clip.h) here instead of
  // scale_grads() first gives bit-identical parameters and state with one
  // pass less over the gradients (bert-base: 433 MB read and written).
  void step(at::Tensor params, const at::Tensor& grads, const std::vector<ElementRange>& decay_ranges,
            double lr, double grad_scale = 1.0);

  // The same step in pieces, for a pipeline that has the gradients span by
  // span (optimizer offload): begin_step() counts the step, then
  // step_span() updates the elements [offset, offset + params.numel()) of the
  // buffer; the spans of one step must cover every element once. Because
  // AdamW is elementwise, the result is bit-identical to step() on the whole
  // buffer. decay_ranges are relative to the whole buffer, as for step().
  void begin_step();
  void step_span(at::Tensor params, const at::Tensor& grads, int64_t offset,
                 const std::vector<ElementRange>& decay_ranges, double lr, double grad_scale = 1.0);

  // Force a kernel (benchmarks and tests); kFusedCpu on anything but a
  // contiguous CPU float32 buffer is an assertion failure at step().
  void set_kernel(Kernel kernel) { kernel_ = kernel; }

  int64_t numel() const { return numel_; }
  const AdamWOptions& options() const { return options_; }

  // State for checkpoints (docs/DESIGN.md, "Checkpoints": /optim/exp_avg/<name>, /optim/exp_avg_sq/<name>,
  // step). The tensors are the live buffers: read them, do not resize them.
  const at::Tensor& exp_avg() const { return exp_avg_; }
  const at::Tensor& exp_avg_sq() const { return exp_avg_sq_; }
  int64_t step_count() const { return step_count_; }
  // Copies `exp_avg` and `exp_avg_sq` (numel() elements each, any device or
  // dtype) into the state and sets the step count. Throws shardtrain::Error on a
  // size mismatch or a negative step count (a checkpoint that does not fit).
  void load_state(const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq, int64_t step_count);

 private:
  // Checks one span's arguments; returns the decay ranges inside it, relative
  // to its start (none when weight_decay is 0: torch multiplies by exactly 1).
  std::vector<ElementRange> checked_span(const at::Tensor& params, const at::Tensor& grads, int64_t offset,
                                         const std::vector<ElementRange>& decay_ranges, double lr) const;
  // The update of elements [offset, offset + params.numel()) at step_count_.
  void update_span(at::Tensor& params, const at::Tensor& grads, int64_t offset,
                   const std::vector<ElementRange>& decay, double lr, double grad_scale);

  AdamWOptions options_;
  int64_t numel_ = 0;
  at::Tensor exp_avg_;
  at::Tensor exp_avg_sq_;
  int64_t step_count_ = 0;
  Kernel kernel_ = Kernel::kAuto;
};

}  // namespace shardtrain
