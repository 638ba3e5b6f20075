#include "shardtrain/optim/adamw.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "shardtrain/core/check.h"

namespace shardtrain {
namespace {

// Scalars exactly as torch's kernels see them: each coefficient is computed in
// float64 (Python floats) and converted to float32 once by the ATen op.
struct StepScalars {
  float decay;             // 1 - lr * wd
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float bias_correction2_sqrt;
  float eps;
  float neg_step_size;     // -(lr / bc1)
  float grad_scale;        // the clip coefficient, as clip's grads.mul_(coef) rounds it
};

StepScalars make_scalars(const AdamWOptions& o, double lr, int64_t step, double grad_scale) {
  const double t = static_cast<double>(step);
  const double bias_correction1 = 1.0 - std::pow(o.beta1, t);
  const double bias_correction2 = 1.0 - std::pow(o.beta2, t);
  const double step_size = lr / bias_correction1;
  StepScalars s;
  s.decay = static_cast<float>(1.0 - lr * o.weight_decay);
  s.beta1 = static_cast<float>(o.beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - o.beta1);
  s.beta2 = static_cast<float>(o.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - o.beta2);
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  s.eps = static_cast<float>(o.eps);
  s.neg_step_size = static_cast<float>(-step_size);
  s.grad_scale = static_cast<float>(grad_scale);
  return s;
}

// One pass over [begin, end). `decay` and `scale` are template flags so the
// inner loop has no branch and vectorizes; every operation is elementwise with
// one rounding per torch op, so results do not depend on where chunks start.
// kScale multiplies the gradient by the clip coefficient first: the same fp32
// product clipping's separate grads.mul_(coef) pass would have stored.
template <bool kDecay, bool kScale>
__attribute__((always_inline)) inline void fused_loop(float* __restrict p, const float* __restrict g,
                                                      float* __restrict m, float* __restrict v, int64_t begin,
                                                      int64_t end, const StepScalars& s) {
  for (int64_t i = begin; i < end; ++i) {
    float param = p[i];
    if (kDecay) param = param * s.decay;
    const float grad = kScale ? g[i] * s.grad_scale : g[i];
    const float exp_avg = m[i] * s.beta1 + s.one_minus_beta1 * grad;
    const float exp_avg_sq = v[i] * s.beta2 + s.one_minus_beta2 * grad * grad;
    // exp_avg_sq >= 0; the file is compiled with -fno-math-errno (CMakeLists.txt)
    // so that GCC emits packed sqrt without the errno branch and vectorizes.
    const float denom = __builtin_sqrtf(exp_avg_sq) / s.bias_correction2_sqrt + s.eps;
    p[i] = param + s.neg_step_size * exp_avg / denom;
    m[i] = exp_avg;
    v[i] = exp_avg_sq;
  }
}

// The loop is the optimizer's whole time, and the build targets the x86-64
// baseline (SSE2: 4 floats per instruction; the packed divide and square root
// bound it, not memory). So it is compiled a second time for AVX2 (8 floats)
// and picked at run time. Not FMA: each multiply and add is rounded on its own
// as before, so both versions give the same bits (add, multiply, divide and
// square root are correctly rounded at any vector width).
template <bool kDecay, bool kScale>
void fused_span_baseline(float* __restrict p, const float* __restrict g, float* __restrict m,
                         float* __restrict v, int64_t begin, int64_t end, const StepScalars& s) {
  fused_loop<kDecay, kScale>(p, g, m, v, begin, end, s);
}

#if defined(__x86_64__) && defined(__GNUC__)
template <bool kDecay, bool kScale>
__attribute__((target("avx2"))) void fused_span_avx2(float* __restrict p, const float* __restrict g,
                                                     float* __restrict m, float* __restrict v, int64_t begin,
                                                     int64_t end, const StepScalars& s) {
  fused_loop<kDecay, kScale>(p, g, m, v, begin, end, s);
}

bool cpu_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
#endif

template <bool kDecay, bool kScale>
void fused_span(float* p, const float* g, float* m, float* v, int64_t begin, int64_t end, const StepScalars& s) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (cpu_has_avx2()) return fused_span_avx2<kDecay, kScale>(p, g, m, v, begin, end, s);
#endif
  fused_span_baseline<kDecay, kScale>(p, g, m, v, begin, end, s);
}

template <bool kScale>
void fused_cpu_step(at::Tensor& params, const at::Tensor& grads, at::Tensor& exp_avg, at::Tensor& exp_avg_sq,
                    const std::vector<ElementRange>& decay_ranges, const StepScalars& s) {
  float* p = params.data_ptr<float>();
  const float* g = grads.data_ptr<float>();
  float* m = exp_avg.data_ptr<float>();
  float* v = exp_avg_sq.data_ptr<float>();
  // 16K elements = 64 KiB per stream, four streams: chunks fit L2, many chunks
  // keep all threads busy on a 100M-element buffer.
  constexpr int64_t kGrain = 16384;
  at::parallel_for(0, params.numel(), kGrain, [&](int64_t chunk_begin, int64_t chunk_end) {
    // First decay range that ends after chunk_begin.
    auto it = std::upper_bound(decay_ranges.begin(), decay_ranges.end(), chunk_begin,
                               [](int64_t i, const ElementRange& r) { return i < r.end; });
    int64_t i = chunk_begin;
    while (i < chunk_end) {
      if (it == decay_ranges.end() || it->begin >= chunk_end) {
        fused_span<false, kScale>(p, g, m, v, i, chunk_end, s);
        break;
      }
      const int64_t decay_begin = std::max(i, it->begin);
      const int64_t decay_end = std::min(chunk_end, it->end);
      fused_span<false, kScale>(p, g, m, v, i, decay_begin, s);
      fused_span<true, kScale>(p, g, m, v, decay_begin, decay_end, s);
      i = decay_end;
      ++it;
    }
  });
}

// torch's _single_tensor_adamw, op for op, on the flat tensors.
void aten_step(at::Tensor& params, const at::Tensor& unscaled_grads, at::Tensor& exp_avg, at::Tensor& exp_avg_sq,
               const std::vector<ElementRange>& decay_ranges, const AdamWOptions& o, double lr, int64_t step,
               double grad_scale) {
  const at::Tensor grads = grad_scale == 1.0 ? unscaled_grads : unscaled_grads.mul(grad_scale);
  const double t = static_cast<double>(step);
  const double bias_correction1 = 1.0 - std::pow(o.beta1, t);
  const double bias_correction2 = 1.0 - std::pow(o.beta2, t);
  const double step_size = lr / bias_correction1;
  const double bias_correction2_sqrt = std::sqrt(bias_correction2);
  const double decay = 1.0 - lr * o.weight_decay;
  for (const ElementRange& r : decay_ranges) params.narrow(0, r.begin, r.size()).mul_(decay);
  exp_avg.mul_(o.beta1).add_(grads, 1.0 - o.beta1);
  exp_avg_sq.mul_(o.beta2).addcmul_(grads, grads, 1.0 - o.beta2);
  at::Tensor denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(o.eps);
  params.addcdiv_(exp_avg, denom, -step_size);
}

void check_options(const AdamWOptions& o) {
  auto bad = [](const std::string& what) { throw Error("AdamW: " + what); };
  if (!(o.lr >= 0)) bad("lr must be >= 0 (train.lr), got " + std::to_string(o.lr));
  if (!(o.beta1 >= 0 && o.beta1 < 1)) bad("beta1 must be in [0, 1), got " + std::to_string(o.beta1));
  if (!(o.beta2 >= 0 && o.beta2 < 1)) bad("beta2 must be in [0, 1), got " + std::to_string(o.beta2));
  if (!(o.eps >= 0)) bad("eps must be >= 0, got " + std::to_string(o.eps));
  if (!(o.weight_decay >= 0))
    bad("weight_decay must be >= 0 (train.weight_decay), got " + std::to_string(o.weight_decay));
}

}  // namespace

AdamW::AdamW(int64_t numel, const AdamWOptions& options, at::TensorOptions state_options)
    : options_(options), numel_(numel) {
  check_options(options_);
  ST_ASSERT(numel >= 0, "AdamW over a negative number of elements");
  const at::TensorOptions opts = state_options.has_dtype() ? state_options : state_options.dtype(at::kFloat);
  exp_avg_ = at::zeros({numel}, opts);
  exp_avg_sq_ = at::zeros({numel}, opts);
}

void AdamW::step(at::Tensor params, const at::Tensor& grads, const std::vector<ElementRange>& decay_ranges,
                 double lr, double grad_scale) {
  TORCH_CHECK(params.dim() == 1 && params.numel() == numel_, "AdamW::step: params must be 1-D with ", numel_,
              " elements, got ", params.sizes());
  TORCH_CHECK(grads.dim() == 1 && grads.numel() == numel_, "AdamW::step: grads must be 1-D with ", numel_,
              " elements, got ", grads.sizes());
  // Checked before the step is counted: a refused step leaves the state as it was.
  const std::vector<ElementRange> decay = checked_span(params, grads, 0, decay_ranges, lr);
  begin_step();
  update_span(params, grads, 0, decay, lr, grad_scale);
}

void AdamW::begin_step() { ++step_count_; }

void AdamW::step_span(at::Tensor params, const at::Tensor& grads, int64_t offset,
                      const std::vector<ElementRange>& decay_ranges, double lr, double grad_scale) {
  TORCH_CHECK(step_count_ > 0, "AdamW::step_span: call begin_step() first");
  update_span(params, grads, offset, checked_span(params, grads, offset, decay_ranges, lr), lr, grad_scale);
}

std::vector<ElementRange> AdamW::checked_span(const at::Tensor& params, const at::Tensor& grads, int64_t offset,
                                              const std::vector<ElementRange>& decay_ranges, double lr) const {
  const int64_t count = params.numel();
  TORCH_CHECK(params.dim() == 1 && grads.dim() == 1 && grads.numel() == count,
              "AdamW::step_span: params and grads must be 1-D with one size, got ", params.sizes(), " and ",
              grads.sizes());
  TORCH_CHECK(offset >= 0 && offset + count <= numel_, "AdamW::step_span: span [", offset, ", ", offset + count,
              ") is outside [0, ", numel_, ")");
  TORCH_CHECK(params.is_contiguous() && grads.is_contiguous(), "AdamW::step: params and grads must be contiguous");
  TORCH_CHECK(params.device() == exp_avg_.device() && grads.device() == exp_avg_.device(),
              "AdamW::step: params, grads and state must be on one device");
  TORCH_CHECK(params.scalar_type() == exp_avg_.scalar_type() && grads.scalar_type() == exp_avg_.scalar_type(),
              "AdamW::step: params, grads and state must have one dtype");
  TORCH_CHECK(lr >= 0, "AdamW::step: lr must be >= 0, got ", lr);
  int64_t previous_end = 0;
  // The decay ranges inside the span, relative to its start.
  std::vector<ElementRange> decay;
  for (const ElementRange& r : decay_ranges) {
    TORCH_CHECK(r.begin >= previous_end && r.begin <= r.end && r.end <= numel_,
                "AdamW::step: decay ranges must be sorted, disjoint and inside [0, ", numel_, "); got [", r.begin,
                ", ", r.end, ")");
    previous_end = r.end;
    const int64_t begin = std::max(r.begin, offset), end = std::min(r.end, offset + count);
    if (begin < end) decay.push_back({begin - offset, end - offset});
  }
  // Weight decay 0 multiplies by exactly 1 in torch: skip the ranges.
  if (options_.weight_decay == 0) decay.clear();
  return decay;
}

void AdamW::update_span(at::Tensor& params, const at::Tensor& grads, int64_t offset,
                        const std::vector<ElementRange>& decay, double lr, double grad_scale) {
  const int64_t count = params.numel();
  at::Tensor exp_avg = exp_avg_.narrow(0, offset, count);
  at::Tensor exp_avg_sq = exp_avg_sq_.narrow(0, offset, count);
  const bool fusable = params.device().is_cpu() && params.scalar_type() == at::kFloat;
  Kernel kernel = kernel_;
  if (kernel == Kernel::kAuto) kernel = fusable ? Kernel::kFusedCpu : Kernel::kAtenOps;
  if (kernel == Kernel::kFusedCpu) {
    ST_ASSERT(fusable, "the fused AdamW kernel needs CPU float32 buffers");
    const StepScalars scalars = make_scalars(options_, lr, step_count_, grad_scale);
    if (grad_scale == 1.0)
      fused_cpu_step<false>(params, grads, exp_avg, exp_avg_sq, decay, scalars);
    else
      fused_cpu_step<true>(params, grads, exp_avg, exp_avg_sq, decay, scalars);
  } else {
    aten_step(params, grads, exp_avg, exp_avg_sq, decay, options_, lr, step_count_, grad_scale);
  }
}

void AdamW::load_state(const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq, int64_t step_count) {
  if (exp_avg.numel() != numel_ || exp_avg_sq.numel() != numel_)
    throw Error("AdamW::load_state: the checkpoint's optimizer state has " + std::to_string(exp_avg.numel()) +
                " / " + std::to_string(exp_avg_sq.numel()) + " elements, this optimizer " + std::to_string(numel_));
  if (step_count < 0) throw Error("AdamW::load_state: negative step count " + std::to_string(step_count));
  exp_avg_.copy_(exp_avg.reshape({-1}));
  exp_avg_sq_.copy_(exp_avg_sq.reshape({-1}));
  step_count_ = step_count;
}

}  // namespace shardtrain
