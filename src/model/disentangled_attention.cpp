// DeBERTa-v2's relative positions, its relative embeddings unit and its
// disentangled attention (model/disentangled_attention.h; docs/DESIGN.md,
// "DeBERTa-v2"). Shapes: B batch, H heads, L padded sequence length, Dh head
// size, N = B x H score matrices, R relative-embedding rows reached (<= 2 L - 1),
// D hidden.
#include "model/disentangled_attention.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>

#include "model/low_precision.h"
#include "shardtrain/model/dropout.h"

namespace shardtrain::detail {
namespace {

// make_log_bucket_position of transformers, op for op in float32 (its
// default dtype), so that every distance lands in the bucket it lands in
// there: distances within position_buckets / 2 stay, longer ones go to
// mid + ceil(log(|r| / mid) / log((max_position - 1) / mid) x (mid - 1)), signed.
at::Tensor log_buckets(const at::Tensor& relative, int64_t bucket_size, int64_t max_position) {
  const int64_t mid = bucket_size / 2;
  const at::Tensor sign = at::sign(relative);
  const at::Tensor near = relative.lt(mid).logical_and(relative.gt(-mid));
  const at::Tensor abs_pos = at::where(near, at::scalar_tensor(mid - 1, relative.options()), relative.abs());
  const at::Tensor log_ratio =
      at::scalar_tensor(static_cast<double>(max_position - 1) / static_cast<double>(mid), at::kFloat).log();
  const at::Tensor log_pos = at::ceil(at::log(abs_pos / mid) / log_ratio * (mid - 1)) + mid;
  return at::where(abs_pos.le(mid), relative.to(log_pos.scalar_type()), log_pos * sign).to(at::kLong);
}

// The inputs of the CPU kernel as it reads them: one [L, Dh] (or [L, L])
// matrix per n, and the position projections per head.
struct KernelInputs {
  int64_t B = 0, H = 0, L = 0, Dh = 0, R = 0;
  at::Tensor q3, k3, v3;     // [N, L, Dh]
  at::Tensor pq, pk;         // [H, R, Dh] or undefined
  at::Tensor mask4;          // [B, H, L, L] (an expanded view)
  at::Tensor index, index_t;  // [L, L] int64
  double inv_scale = 1.0;

  int64_t N() const { return B * H; }
  // q of matrix n over s: every product below reads it scaled (see the header).
  at::Tensor scaled_query(int64_t n) const { return q3[n] * inv_scale; }

  // Matrix n's softmax output [L, L]: float32 for 16-bit scores, as
  // model/attention.h's kernel (autograd under torch.autocast keeps it so).
  at::Tensor probs(int64_t n, const at::Tensor& qs) const {
    const int64_t h = n % H;
    at::Tensor scores = at::mm(qs, k3[n].t());
    if (pk.defined()) scores.add_(at::mm(qs, pk[h].t()).gather(1, index));
    if (pq.defined()) scores.add_(at::mm(k3[n], pq[h].t()).gather(1, index_t).t());
    scores.add_(mask4[n / H][h]);
    return is_16bit(scores.scalar_type()) ? at::softmax(scores, -1, at::kFloat) : at::softmax(scores, -1);
  }
};

KernelInputs kernel_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& pq,
                           const at::Tensor& pk, const at::Tensor& mask4, const at::Tensor& index,
                           const at::Tensor& index_t, double inv_scale) {
  KernelInputs in;
  in.B = mask4.size(0);
  in.H = mask4.size(1);
  in.L = q.size(-2);
  in.Dh = q.size(-1);
  // Absent terms come as empty tensors (an autograd Function takes no undefined ones).
  auto present = [](const at::Tensor& t) { return t.numel() > 0 ? t : at::Tensor(); };
  in.pq = present(pq);
  in.pk = present(pk);
  in.R = in.pk.defined() ? in.pk.size(1) : in.pq.defined() ? in.pq.size(1) : 0;
  in.q3 = q.reshape({in.N(), in.L, in.Dh});
  in.k3 = k.reshape({in.N(), in.L, in.Dh});
  in.v3 = v.reshape({in.N(), in.L, in.Dh});
  in.mask4 = mask4;
  in.index = index;
  in.index_t = index_t;
  in.inv_scale = inv_scale;
  return in;
}

// The whole attention of one layer as one autograd node; each thread takes a
// contiguous share of the N matrices. `recompute`: keep no probabilities,
// compute each matrix's again in backward and draw its dropout mask again
// (the same counter-based mask: model/dropout.h's dropout_noise_slice).
struct DisentangledCpuAttention : public torch::autograd::Function<DisentangledCpuAttention> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const at::Tensor& pq, const at::Tensor& pk,
                            const at::Tensor& additive_mask, const at::Tensor& index, const at::Tensor& index_t,
                            double inv_scale, double dropout_p, bool training, bool recompute) {
    const int64_t B = q.size(0), H = q.size(1), L = q.size(2);
    const KernelInputs in =
        kernel_inputs(q, k, v, pq, pk, additive_mask.expand({B, H, L, L}), index, index_t, inv_scale);
    const at::ScalarType dtype = q.scalar_type();
    const bool dropout_on = training && dropout_p > 0;
    const uint64_t seed = dropout_on ? dropout_seed() : 0;
    const int64_t N = in.N(), Dh = in.Dh;
    at::Tensor wide_probs, noise;
    if (!recompute) {
      wide_probs = at::empty({N, L, L}, q.options().dtype(is_16bit(dtype) ? at::kFloat : dtype));
      if (dropout_on) noise = dropout_noise_slice(seed, 0, {N, L, L}, dropout_p, dtype);
    }
    at::Tensor context = at::empty({N, L, Dh}, q.options());
    at::parallel_for(0, N, 1, [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n) {
        const at::Tensor wide = in.probs(n, in.scaled_query(n));
        if (!recompute) wide_probs[n].copy_(wide);
        at::Tensor probs = wide.to(dtype);
        if (dropout_on)
          probs = probs * (recompute ? dropout_noise_slice(seed, n * L * L, {L, L}, dropout_p, dtype) : noise[n]);
        at::Tensor out = context[n];
        at::mm_out(out, probs, in.v3[n]);
      }
    });
    ctx->save_for_backward({in.q3, in.k3, in.v3, pq, pk, in.mask4, index, index_t, wide_probs, noise});
    ctx->saved_data["inv_scale"] = inv_scale;
    ctx->saved_data["dropout_p"] = dropout_on ? dropout_p : 0.0;
    ctx->saved_data["seed"] = static_cast<int64_t>(seed);  // an int64 IValue holds the seed's bits
    return context.view({B, H, L, Dh});
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &mask4 = saved[5], &saved_probs = saved[8], &saved_noise = saved[9];
    KernelInputs in = kernel_inputs(saved[0], saved[1], saved[2], saved[3], saved[4], mask4, saved[6], saved[7],
                                    ctx->saved_data["inv_scale"].toDouble());
    const double dropout_p = ctx->saved_data["dropout_p"].toDouble();
    const uint64_t seed = static_cast<uint64_t>(ctx->saved_data["seed"].toInt());
    const bool recompute = !saved_probs.defined();
    const int64_t B = in.B, H = in.H, L = in.L, Dh = in.Dh, R = in.R, N = in.N();
    const at::ScalarType dtype = in.q3.scalar_type();
    // The position projections' gradients sum over the batch: per matrix
    // first, in float32 for 16-bit activations, then added up.
    const at::ScalarType sum_type = is_16bit(dtype) ? at::kFloat : dtype;
    const at::Tensor g3 = grad_outputs[0].reshape({N, L, Dh});
    at::Tensor grad_q = at::empty({N, L, Dh}, in.q3.options());
    at::Tensor grad_k = at::empty({N, L, Dh}, in.q3.options());
    at::Tensor grad_v = at::empty({N, L, Dh}, in.q3.options());
    at::Tensor grad_pk = in.pk.defined() ? at::empty({N, R, Dh}, in.q3.options().dtype(sum_type)) : at::Tensor();
    at::Tensor grad_pq = in.pq.defined() ? at::empty({N, R, Dh}, in.q3.options().dtype(sum_type)) : at::Tensor();
    at::parallel_for(0, N, 1, [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n) {
        const int64_t h = n % H;
        const at::Tensor qs = in.scaled_query(n);
        const at::Tensor wide = recompute ? in.probs(n, qs) : saved_probs[n];
        const at::Tensor probs = wide.to(dtype);
        at::Tensor noise;
        if (dropout_p > 0)
          noise = recompute ? dropout_noise_slice(seed, n * L * L, {L, L}, dropout_p, dtype) : saved_noise[n];
        const at::Tensor g = g3[n];
        at::Tensor grad_v_n = grad_v[n];
        at::mm_out(grad_v_n, noise.defined() ? (probs * noise).t() : probs.t(), g);
        at::Tensor grad_probs = at::mm(g, in.v3[n].t());
        if (noise.defined()) grad_probs.mul_(noise);
        const at::Tensor grad_scores =
            at::_softmax_backward_data(grad_probs.to(wide.scalar_type()), wide, -1, wide.scalar_type()).to(dtype);
        at::Tensor grad_qs = at::mm(grad_scores, in.k3[n]);
        at::Tensor grad_k_n = grad_k[n];
        at::mm_out(grad_k_n, grad_scores.t(), qs);
        if (in.pk.defined()) {
          // c2p: scores[i, j] += (qs pk^T)[i, index[i, j]]: the gather's
          // gradient adds each score's gradient into its row of [L, R].
          const at::Tensor grad_rows = at::zeros({L, R}, grad_scores.options()).scatter_add_(1, in.index, grad_scores);
          grad_qs.add_(at::mm(grad_rows, in.pk[h]));
          grad_pk[n].copy_(at::mm(grad_rows.t(), qs));
        }
        if (in.pq.defined()) {
          // p2c: scores[i, j] += (k pq^T)[j, index_t[j, i]].
          const at::Tensor grad_rows =
              at::zeros({L, R}, grad_scores.options()).scatter_add_(1, in.index_t, grad_scores.t());
          grad_k_n.add_(at::mm(grad_rows, in.pq[h]));
          grad_pq[n].copy_(at::mm(grad_rows.t(), in.k3[n]));
        }
        grad_q[n].copy_(grad_qs.mul_(in.inv_scale));
      }
    });
    auto per_head = [&](const at::Tensor& per_matrix) {
      return per_matrix.defined() ? per_matrix.view({B, H, R, Dh}).sum(0).to(dtype) : at::Tensor();
    };
    return {grad_q.view({B, H, L, Dh}),
            grad_k.view({B, H, L, Dh}),
            grad_v.view({B, H, L, Dh}),
            per_head(grad_pq),
            per_head(grad_pk),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor()};
  }
};

// Softmax over the last dimension; in float32 for 16-bit scores, cast back
// (docs/DESIGN.md, "Mixed precision").
at::Tensor softmax_wide(const at::Tensor& scores) {
  return is_16bit(scores.scalar_type()) ? at::softmax(scores, -1, at::kFloat).to(scores.scalar_type())
                                        : at::softmax(scores, -1);
}

// The same attention in ATen ops (other devices; the CPU with the kernel off).
at::Tensor disentangled_attention_ops(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const at::Tensor& pq, const at::Tensor& pk, const at::Tensor& additive_mask,
                                      const at::Tensor& index, const at::Tensor& index_t, double inv_scale,
                                      double dropout_p, bool training) {
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2);
  const at::Tensor qs = q * inv_scale;
  at::Tensor scores = at::matmul(qs, k.transpose(-1, -2));  // [B, H, L, L]
  if (pk.defined()) scores = scores + at::matmul(qs, pk.transpose(-1, -2)).gather(-1, index.expand({B, H, L, L}));
  if (pq.defined())
    scores = scores + at::matmul(k, pq.transpose(-1, -2)).gather(-1, index_t.expand({B, H, L, L})).transpose(-1, -2);
  return at::matmul(shardtrain::dropout(softmax_wide(scores + additive_mask), dropout_p, training), v);
}

}  // namespace

RelativePositions RelativePositions::build(const EncoderConfig& c, int64_t length, const at::Device& device) {
  const int64_t span = c.relative_span();
  // Every distance i - j of the batch, from -(L - 1) to L - 1, and its row.
  const at::Tensor distance = at::arange(-(length - 1), length, at::TensorOptions().dtype(at::kLong));
  const at::Tensor bucket =
      c.position_buckets > 0 ? log_buckets(distance, c.position_buckets, c.relative_positions_limit()) : distance;
  const at::Tensor row = (bucket + span).clamp(0, 2 * span - 1);  // non-decreasing in the distance
  RelativePositions p;
  p.first_row = row[0].item<int64_t>();
  p.num_rows = row[-1].item<int64_t>() - p.first_row + 1;
  const at::Tensor positions = at::arange(length, at::TensorOptions().dtype(at::kLong));
  const at::Tensor at_distance = (positions.unsqueeze(1) - positions.unsqueeze(0) + (length - 1)).flatten();
  const at::Tensor index = (row - p.first_row).index_select(0, at_distance).view({length, length});
  p.index = index.to(device);
  p.index_t = index.t().contiguous().to(device);
  return p;
}

at::Tensor relative_embeddings(const EncoderConfig& c, const UnitWeights& w) {
  const at::Tensor& table = w[Slot::kRelativeEmbeddings];
  if (c.norm_relative_embeddings())
    return layer_norm(table, w[Slot::kRelativeNormWeight], w[Slot::kRelativeNormBias], c.layer_norm_eps);
  // A copy, not the parameter: the layers read this after a sharded strategy
  // freed the unit (and its backward, the identity, needs nothing of it).
  return table.clone();
}

PositionTerms position_terms(const LayerSpec& spec, const UnitWeights& w, const RelativeContext& relative,
                             bool training) {
  PositionTerms terms;
  if (!spec.content_to_position && !spec.position_to_content) return terms;
  const RelativePositions& p = relative.positions;
  // Only the rows the batch reaches are projected; pos_dropout on them
  // (transformers drops out the whole table: the same distribution).
  const at::Tensor rows =
      shardtrain::dropout(relative.embeddings.narrow(0, p.first_row, p.num_rows), spec.position_dropout, training);
  const int64_t R = p.num_rows, H = spec.num_heads, Dh = rows.size(1) / H;
  auto heads = [&](Slot weight, Slot shared_weight) {
    const Slot which = spec.share_att_key ? shared_weight : weight;
    // Shared: the layer's own query / key Linear, LoRA update included (as PEFT's module runs).
    return linear_at(w, which, rows, training).view({R, H, Dh}).permute({1, 0, 2}).contiguous();  // [H, R, Dh]
  };
  if (spec.content_to_position) terms.key = heads(Slot::kPositionKeyWeight, Slot::kKeyWeight);
  if (spec.position_to_content) terms.query = heads(Slot::kPositionQueryWeight, Slot::kQueryWeight) / spec.attention_scale;
  return terms;
}

at::Tensor disentangled_attention(const LayerSpec& spec, const at::Tensor& q, const at::Tensor& k,
                                  const at::Tensor& v, const at::Tensor& additive_mask, const PositionTerms& terms,
                                  const RelativePositions* positions, bool training) {
  const double inv_scale = 1.0 / spec.attention_scale;
  const at::Tensor index = positions ? positions->index : at::Tensor();
  const at::Tensor index_t = positions ? positions->index_t : at::Tensor();
  if (q.device().is_cpu() && spec.cpu_attention_kernel) {
    const double score_elements = static_cast<double>(q.size(0) * q.size(1) * q.size(2)) * static_cast<double>(k.size(2));
    // Without a backward to come (eval, no_grad) there is nothing to keep.
    auto needs_grad = [](const at::Tensor& t) { return t.defined() && t.requires_grad(); };
    const bool backward_follows = at::GradMode::is_enabled() && (needs_grad(q) || needs_grad(k) || needs_grad(v) ||
                                                                 needs_grad(terms.key) || needs_grad(terms.query));
    const bool recompute = !backward_follows || score_elements > static_cast<double>(spec.attention_block_threshold);
    auto or_empty = [&](const at::Tensor& t) { return t.defined() ? t : at::empty({0}, q.options()); };
    return DisentangledCpuAttention::apply(q, k, v, or_empty(terms.query), or_empty(terms.key), additive_mask,
                                           positions ? index : at::empty({0}, q.options().dtype(at::kLong)),
                                           positions ? index_t : at::empty({0}, q.options().dtype(at::kLong)),
                                           inv_scale, spec.attention_probs_dropout, training, recompute);
  }
  return disentangled_attention_ops(q, k, v, terms.query, terms.key, additive_mask, index, index_t, inv_scale,
                                    spec.attention_probs_dropout, training);
}

}  // namespace shardtrain::detail
