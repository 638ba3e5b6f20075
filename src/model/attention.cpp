// Shapes: B batch, H heads, L sequence length, Dh head size, N = B * H.
#include "model/attention.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/version.h>

#include <cmath>

#include "model/low_precision.h"
#include "shardtrain/model/dropout.h"

// LibTorch 2.x has scaled_dot_product_attention; the kernel below is for 1.x.
#if !(defined(TORCH_VERSION_MAJOR) && TORCH_VERSION_MAJOR >= 2)
#define SHARDTRAIN_CPU_ATTENTION 1
#endif

namespace shardtrain {
namespace detail {
#if SHARDTRAIN_CPU_ATTENTION
namespace {

// Softmax over the last dimension; in float32 for 16-bit scores, cast back,
// as torch.autocast runs it (docs/DESIGN.md, "Mixed precision").
at::Tensor softmax_last(const at::Tensor& scores) {
  return is_16bit(scores.scalar_type()) ? at::softmax(scores, -1, at::kFloat).to(scores.scalar_type())
                                        : at::softmax(scores, -1);
}

// out[n] = a[n] b[n] for n in [0, N): each thread one contiguous share of the
// N products, each share one bmm that runs serially inside the parallel region.
void parallel_bmm(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  at::parallel_for(0, a.size(0), 1, [&](int64_t begin, int64_t end) {
    at::Tensor share = out.narrow(0, begin, end - begin);
    at::bmm_out(share, a.narrow(0, begin, end - begin), b.narrow(0, begin, end - begin));
  });
}

at::Tensor batched_product(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor out = at::empty({a.size(0), a.size(1), b.size(2)}, a.options());
  parallel_bmm(a, b, out);
  return out;
}

// The attention of one layer as one autograd node (see attention.h).
struct CpuAttention : public torch::autograd::Function<CpuAttention> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const at::Tensor& additive_mask, double dropout_p, bool training) {
    // Lk: keys, L for self-attention, a band's width for sliding-window blocks.
    const int64_t B = q.size(0), H = q.size(1), L = q.size(2), Lk = k.size(2), Dh = q.size(3), N = B * H;
    const at::Tensor q3 = q.reshape({N, L, Dh}), k3 = k.reshape({N, Lk, Dh}), v3 = v.reshape({N, Lk, Dh});
    at::Tensor scores = batched_product(q3, k3.transpose(1, 2));  // [N, L, Lk]
    scores.view({B, H, L, Lk}).div_(std::sqrt(static_cast<double>(Dh))).add_(additive_mask);
    // 16-bit scores: the softmax in float32, and its float32 output is what
    // backward reads (autograd under torch.autocast saves it so); the matmul
    // takes it cast back.
    const at::Tensor wide_probs = is_16bit(scores.scalar_type()) ? at::softmax(scores, -1, at::kFloat)
                                                                  : at::softmax(scores, -1);
    const at::Tensor probs = wide_probs.to(scores.scalar_type());
    at::Tensor noise, dropped = probs;
    if (training && dropout_p > 0) {
      noise = dropout_noise(probs, dropout_p);  // dropout(probs) = probs * noise, as model/dropout.h
      dropped = probs * noise;
    }
    const at::Tensor context = batched_product(dropped, v3);  // [N, L, Dh]
    ctx->save_for_backward({q3, k3, v3, wide_probs, noise});
    ctx->saved_data["scale"] = std::sqrt(static_cast<double>(Dh));
    return context.view({B, H, L, Dh});
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q3 = saved[0], &k3 = saved[1], &v3 = saved[2], &wide_probs = saved[3], &noise = saved[4];
    const at::Tensor probs = wide_probs.to(q3.scalar_type());  // no copy in fp32
    const at::Tensor& grad = grad_outputs[0];
    const int64_t B = grad.size(0), H = grad.size(1), L = grad.size(2), Dh = grad.size(3), N = B * H;
    const int64_t Lk = k3.size(1);
    const at::Tensor g3 = grad.reshape({N, L, Dh});
    const at::Tensor dropped = noise.defined() ? probs * noise : probs;
    const at::Tensor grad_v = batched_product(dropped.transpose(1, 2), g3);
    at::Tensor grad_probs = batched_product(g3, v3.transpose(1, 2));  // d loss / d dropped
    if (noise.defined()) grad_probs = grad_probs * noise;
    // 16-bit: the softmax gradient in float32 from the float32 output, cast back.
    const at::ScalarType wide = wide_probs.scalar_type();
    at::Tensor grad_scores =
        at::_softmax_backward_data(grad_probs.to(wide), wide_probs, -1, wide).to(q3.scalar_type());
    grad_scores = grad_scores / ctx->saved_data["scale"].toDouble();
    const at::Tensor grad_q = batched_product(grad_scores, k3);
    const at::Tensor grad_k = batched_product(grad_scores.transpose(1, 2), q3);
    return {grad_q.view({B, H, L, Dh}), grad_k.view({B, H, Lk, Dh}), grad_v.view({B, H, Lk, Dh}), at::Tensor(),
            at::Tensor(), at::Tensor()};
  }
};

}  // namespace
#endif

at::Tensor scaled_dot_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& additive_mask, double dropout_p, bool training) {
#if !SHARDTRAIN_CPU_ATTENTION
  return at::scaled_dot_product_attention(q, k, v, additive_mask, training ? dropout_p : 0.0, false);
#else
  if (q.device().is_cpu()) return CpuAttention::apply(q, k, v, additive_mask, dropout_p, training);
  const double Dh = static_cast<double>(q.size(-1));
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1));  // [B, H, L, L]
  scores.div_(std::sqrt(Dh)).add_(additive_mask);
  return at::matmul(shardtrain::dropout(softmax_last(scores), dropout_p, training), v);
#endif
}

}  // namespace detail
}  // namespace shardtrain
