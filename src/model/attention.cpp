// Shapes: B batch, H heads, L sequence length, Dh head size, N = B * H.
#include "model/attention.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/version.h>

#include <algorithm>
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

// The attention of one layer as one autograd node (see attention.h), all
// N = B x H score matrices at once: forward keeps the [N, L, Lk] softmax
// output (and the dropout mask) for backward.
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

// Score elements of one block at most: [rows, Lk] with rows = max(1, this /
// Lk); a thread holds four such matrices at a time (scores, probabilities,
// their gradients), 16 MiB in fp32. A threshold below it (but 0) makes
// blocks smaller (tests reach several blocks per matrix on small shapes).
constexpr int64_t kBlockElements = int64_t{1} << 20;

// One block of score rows: matrix n = b H + h, query rows [r0, r0 + rows).
struct ScoreBlock {
  int64_t n, r0, rows;
};

// The same attention, one [rows, Lk] block of one score matrix at a time
// (docs/DESIGN.md, "Unpadded batches and the CPU kernels"): nothing of size
// L x Lk outlives its block. Forward keeps only q, k, v (views of the
// layer's qkv) and the dropout seed; backward computes each block's scores
// and softmax again (the same ops on the same inputs: the same values) and
// draws the same dropout mask again (model/dropout.h, dropout_noise_slice:
// the block's range of the whole mask the unblocked kernel would draw), one
// matmul more than CpuAttention for an O(L) memory footprint. The threads
// split the N matrices, so each accumulates its own matrices' key and value
// gradients with no sharing.
struct ChunkedCpuAttention : public torch::autograd::Function<ChunkedCpuAttention> {
  struct Shape {
    int64_t B, H, L, Lk, Dh, N, rows_per_block;
  };
  static Shape make_shape(int64_t B, int64_t H, int64_t L, int64_t Lk, int64_t Dh, int64_t threshold) {
    const int64_t block_elements = threshold > 0 ? std::min(kBlockElements, threshold) : kBlockElements;
    return Shape{B, H, L, Lk, Dh, B * H, std::max<int64_t>(1, block_elements / Lk)};
  }

  // Each block of the matrices [begin, end), in order.
  template <class F>
  static void for_each_block(const Shape& s, int64_t begin, int64_t end, F&& f) {
    for (int64_t n = begin; n < end; ++n)
      for (int64_t r0 = 0; r0 < s.L; r0 += s.rows_per_block) f(ScoreBlock{n, r0, std::min(s.rows_per_block, s.L - r0)});
  }

  // A block's softmax output (float32 for 16-bit scores, as CpuAttention),
  // and its dropout mask when dropout is on.
  static at::Tensor block_probs(const Shape& s, const ScoreBlock& blk, const at::Tensor& q3, const at::Tensor& k3,
                                const at::Tensor& mask4) {
    at::Tensor scores = at::mm(q3[blk.n].narrow(0, blk.r0, blk.rows), k3[blk.n].t());  // [rows, Lk]
    scores.div_(std::sqrt(static_cast<double>(s.Dh))).add_(mask4[blk.n / s.H][blk.n % s.H].narrow(0, blk.r0, blk.rows));
    return is_16bit(scores.scalar_type()) ? at::softmax(scores, -1, at::kFloat) : at::softmax(scores, -1);
  }
  static at::Tensor block_noise(const Shape& s, const ScoreBlock& blk, uint64_t seed, double p, at::ScalarType dtype) {
    return dropout_noise_slice(seed, (blk.n * s.L + blk.r0) * s.Lk, {blk.rows, s.Lk}, p, dtype);
  }

  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const at::Tensor& additive_mask, double dropout_p, bool training,
                            int64_t threshold) {
    const Shape s = make_shape(q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), threshold);
    const at::Tensor q3 = q.reshape({s.N, s.L, s.Dh}), k3 = k.reshape({s.N, s.Lk, s.Dh}),
                     v3 = v.reshape({s.N, s.Lk, s.Dh});
    const at::Tensor mask4 = additive_mask.expand({s.B, s.H, s.L, s.Lk});
    const bool dropout_on = training && dropout_p > 0;
    const uint64_t seed = dropout_on ? dropout_seed() : 0;
    at::Tensor context = at::empty({s.N, s.L, s.Dh}, q.options());
    at::parallel_for(0, s.N, 1, [&](int64_t begin, int64_t end) {
      for_each_block(s, begin, end, [&](const ScoreBlock& blk) {
        at::Tensor probs = block_probs(s, blk, q3, k3, mask4).to(q.scalar_type());
        if (dropout_on) probs = probs * block_noise(s, blk, seed, dropout_p, q.scalar_type());
        at::Tensor out = context[blk.n].narrow(0, blk.r0, blk.rows);
        at::mm_out(out, probs, v3[blk.n]);
      });
    });
    ctx->save_for_backward({q3, k3, v3, mask4});
    ctx->saved_data["dropout_p"] = dropout_on ? dropout_p : 0.0;
    ctx->saved_data["threshold"] = threshold;
    // An int64 IValue holds the seed's bits.
    ctx->saved_data["seed"] = static_cast<int64_t>(seed);
    return context.view({s.B, s.H, s.L, s.Dh});
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q3 = saved[0], &k3 = saved[1], &v3 = saved[2], &mask4 = saved[3];
    const Shape s = make_shape(mask4.size(0), mask4.size(1), q3.size(1), k3.size(1), q3.size(2),
                               ctx->saved_data["threshold"].toInt());
    const double dropout_p = ctx->saved_data["dropout_p"].toDouble();
    const uint64_t seed = static_cast<uint64_t>(ctx->saved_data["seed"].toInt());
    const at::ScalarType dtype = q3.scalar_type();
    // Key and value gradients sum over the row blocks: in float32 for 16-bit
    // activations (one bmm over all rows, as CpuAttention, accumulates so too).
    const at::ScalarType sum_type = is_16bit(dtype) ? at::kFloat : dtype;
    const at::Tensor g3 = grad_outputs[0].reshape({s.N, s.L, s.Dh});
    at::Tensor grad_q = at::empty({s.N, s.L, s.Dh}, q3.options());
    at::Tensor grad_k = at::zeros({s.N, s.Lk, s.Dh}, q3.options().dtype(sum_type));
    at::Tensor grad_v = at::zeros({s.N, s.Lk, s.Dh}, q3.options().dtype(sum_type));
    const double scale = std::sqrt(static_cast<double>(s.Dh));
    at::parallel_for(0, s.N, 1, [&](int64_t begin, int64_t end) {
      for_each_block(s, begin, end, [&](const ScoreBlock& blk) {
        const at::Tensor wide_probs = block_probs(s, blk, q3, k3, mask4);  // [rows, Lk]
        const at::Tensor probs = wide_probs.to(dtype);
        const at::Tensor g = g3[blk.n].narrow(0, blk.r0, blk.rows);     // [rows, Dh]
        at::Tensor noise, dropped = probs;
        if (dropout_p > 0) {
          noise = block_noise(s, blk, seed, dropout_p, dtype);
          dropped = probs * noise;
        }
        grad_v[blk.n].add_(at::mm(dropped.t(), g).to(sum_type));
        at::Tensor grad_probs = at::mm(g, v3[blk.n].t());
        if (noise.defined()) grad_probs = grad_probs * noise;
        const at::ScalarType wide = wide_probs.scalar_type();
        at::Tensor grad_scores =
            at::_softmax_backward_data(grad_probs.to(wide), wide_probs, -1, wide).to(dtype).div_(scale);
        at::Tensor grad_q_rows = grad_q[blk.n].narrow(0, blk.r0, blk.rows);
        at::mm_out(grad_q_rows, grad_scores, k3[blk.n]);
        grad_k[blk.n].add_(at::mm(grad_scores.t(), q3[blk.n].narrow(0, blk.r0, blk.rows)).to(sum_type));
      });
    });
    return {grad_q.view({s.B, s.H, s.L, s.Dh}), grad_k.to(dtype).view({s.B, s.H, s.Lk, s.Dh}),
            grad_v.to(dtype).view({s.B, s.H, s.Lk, s.Dh}), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace
#endif

at::Tensor scaled_dot_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& additive_mask, double dropout_p, bool training,
                                int64_t block_threshold) {
#if !SHARDTRAIN_CPU_ATTENTION
  (void)block_threshold;
  return at::scaled_dot_product_attention(q, k, v, additive_mask, training ? dropout_p : 0.0, false);
#else
  if (q.device().is_cpu()) {
    const int64_t score_elements = q.size(0) * q.size(1) * q.size(2) * k.size(2);
    if (score_elements > block_threshold)
      return ChunkedCpuAttention::apply(q, k, v, additive_mask, dropout_p, training, block_threshold);
    return CpuAttention::apply(q, k, v, additive_mask, dropout_p, training);
  }
  const double Dh = static_cast<double>(q.size(-1));
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1));  // [B, H, L, L]
  scores.div_(std::sqrt(Dh)).add_(additive_mask);
  return at::matmul(shardtrain::dropout(softmax_last(scores), dropout_p, training), v);
#endif
}

}  // namespace detail
}  // namespace shardtrain
