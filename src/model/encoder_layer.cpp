// The one encoder layer of every family (docs/DESIGN.md, "Model families").
// Shapes: see model/encoder.h.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <vector>

#include "model/attention.h"
#include "model/disentangled_attention.h"
#include "model/encoder.h"
#include "model/low_precision.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/model/dropout.h"

namespace shardtrain::detail {
namespace {

// [..., D] -> [..., 3D]: q, k and v from one matmul. BERT-style families keep
// three parameters under HF's names; their weights are concatenated per call,
// and the LoRA updates of those that have one are added to their third.
at::Tensor project_qkv(const UnitWeights& w, const at::Tensor& hidden, bool training) {
  if (w[Slot::kQkvWeight].defined()) return linear_at(w, Slot::kQkvWeight, hidden, training);
  const at::Tensor bias = w[Slot::kQueryBias].defined()
                              ? at::cat({w[Slot::kQueryBias], w[Slot::kKeyBias], w[Slot::kValueBias]})
                              : at::Tensor();
  at::Tensor qkv =
      at::linear(hidden, at::cat({w[Slot::kQueryWeight], w[Slot::kKeyWeight], w[Slot::kValueWeight]}), bias);
  const Slot parts[] = {Slot::kQueryWeight, Slot::kKeyWeight, Slot::kValueWeight};
  if (std::none_of(std::begin(parts), std::end(parts), [&](Slot s) { return w.has_lora(s); })) return qkv;
  std::vector<at::Tensor> updates;
  for (Slot s : parts)
    updates.push_back(w.has_lora(s) ? lora_update(w, s, hidden, training)
                                    : at::zeros_like(qkv.narrow(-1, 0, w[s].size(0))));
  return qkv + at::cat(updates, -1);
}

// Grouped-query attention: qkv [..., (H + 2 Hkv) Dh] -> [..., 3 H Dh], key
// and value head j repeated for query heads j n .. j n + n - 1, n = H / Hkv
// (transformers' repeat_kv), so that attention runs as multi-head.
at::Tensor expand_kv(const LayerSpec& spec, const at::Tensor& qkv) {
  const int64_t H = spec.num_heads, Hkv = spec.num_kv_heads;
  if (Hkv <= 0 || Hkv == H) return qkv;
  const int64_t Dh = qkv.size(-1) / (H + 2 * Hkv);
  std::vector<int64_t> lead = qkv.sizes().vec();
  lead.pop_back();
  auto shape = [&](std::initializer_list<int64_t> tail) {
    std::vector<int64_t> out = lead;
    out.insert(out.end(), tail);
    return out;
  };
  auto repeat = [&](const at::Tensor& t) {
    return t.reshape(shape({Hkv, 1, Dh})).expand(shape({Hkv, H / Hkv, Dh})).reshape(shape({H * Dh}));
  };
  return at::cat({qkv.narrow(-1, 0, H * Dh), repeat(qkv.narrow(-1, H * Dh, Hkv * Dh)),
                  repeat(qkv.narrow(-1, (H + Hkv) * Dh, Hkv * Dh))},
                 -1);
}

// rotate_half(x) = cat(-x2, x1) over the last dimension.
at::Tensor rotate_half(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({x.narrow(-1, half, half).neg(), x.narrow(-1, 0, half)}, -1);
}

// q and k of qkv [..., 3, H, Dh] rotated in place of a copy; cos/sin [N, Dh]
// with N the token dimension just before the 3.
at::Tensor apply_rotary(const at::Tensor& qkv, const Rotary& rotary) {
  const at::ScalarType dtype = qkv.scalar_type();
  // [N, 1, Dh]: broadcast over the heads (and, padded, over the batch).
  const at::Tensor cos = rotary.cos.to(dtype).unsqueeze(-2), sin = rotary.sin.to(dtype).unsqueeze(-2);
  const at::Tensor q = qkv.select(-3, 0), k = qkv.select(-3, 1), v = qkv.select(-3, 2);
  const at::Tensor q_rot = q * cos + rotate_half(q) * sin;
  const at::Tensor k_rot = k * cos + rotate_half(k) * sin;
  return at::stack({q_rot, k_rot, v}, -3);
}

// DeBERTa's position terms of one layer (model/disentangled_attention.h).
struct Disentangled {
  PositionTerms terms;
  const RelativePositions* positions = nullptr;
};

// qkv [B, L, 3D] -> context [B, L, D].
at::Tensor attend_padded(const LayerSpec& spec, const at::Tensor& qkv, const at::Tensor& additive_mask,
                         const Rotary* rotary, const Disentangled* disentangled, bool training) {
  const int64_t B = qkv.size(0), L = qkv.size(1), D = qkv.size(2) / 3;
  const int64_t H = spec.num_heads, Dh = D / H;
  at::Tensor split = qkv.view({B, L, 3, H, Dh});
  if (rotary) split = apply_rotary(split, *rotary);
  // view + permute is a stride change, not a copy.
  const at::Tensor heads = split.permute({2, 0, 3, 1, 4});  // [3, B, H, L, Dh]
  const at::Tensor context =
      disentangled ? disentangled_attention(spec, heads[0], heads[1], heads[2], additive_mask, disentangled->terms,
                                            disentangled->positions, training)
                   : scaled_dot_attention(heads[0], heads[1], heads[2], additive_mask, spec.attention_probs_dropout,
                                          training, spec.attention_block_threshold);
  // reshape: the one copy, heads back to [B, L, D].
  return context.transpose(1, 2).reshape({B, L, D});
}

// qkv [T, 3D] of a packed batch (rotated) -> context [T, D], in blocks of
// queries against the keys of their band (BandedMask, model/encoder.h).
at::Tensor attend_banded(const LayerSpec& spec, const at::Tensor& qkv, const BandedMask& band, bool training) {
  const int64_t T = qkv.size(0), D = qkv.size(1) / 3, H = spec.num_heads, Dh = D / H;
  const int64_t Bq = band.block, hw = band.half_window, W = band.width();
  const int64_t nb = (T + Bq - 1) / Bq, Tq = nb * Bq;
  const at::Tensor split = qkv.view({T, 3, H, Dh});
  // [nb, H, Bq, Dh]: the queries, zero rows past T.
  const at::Tensor q = at::constant_pad_nd(split.select(1, 0), {0, 0, 0, 0, 0, Tq - T}).view({nb, Bq, H, Dh})
                           .permute({0, 2, 1, 3});
  // [nb, H, W, Dh]: block b's keys (values) are rows [b Bq - hw, b Bq + Bq + hw)
  // of the packed keys with hw zero rows before and after; unfold is a view,
  // its backward adds the overlapping windows back.
  auto band_of = [&](int64_t which) {
    return at::constant_pad_nd(split.select(1, which), {0, 0, 0, 0, hw, Tq - T + hw}).unfold(0, W, Bq).transpose(-1, -2);
  };
  const at::Tensor context =
      scaled_dot_attention(q, band_of(1), band_of(2), band.additive, spec.attention_probs_dropout, training,
                           spec.attention_block_threshold);
  return context.permute({0, 2, 1, 3}).reshape({Tq, D}).narrow(0, 0, T);
}

// rows [T, C] -> [N, C], zeros except row rows_at[t] = rows[t] (rows_at
// distinct). ATen's index_copy does this, but its autograd node keeps the
// source (IndexCopyBackward0 saves it for expand_as): a packed layer's whole
// [T, 3D] qkv alive until backward beside the padded copy the attention
// keeps. Here backward needs only the index (docs/DESIGN.md, "Unpadded
// batches and the CPU kernels").
struct ScatterRows : public torch::autograd::Function<ScatterRows> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& rows, const at::Tensor& rows_at,
                            int64_t N) {
    ctx->save_for_backward({rows_at});
    return at::zeros({N, rows.size(1)}, rows.options()).index_copy_(0, rows_at, rows);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const at::Tensor rows_at = ctx->get_saved_variables()[0];
    return {grad_outputs[0].index_select(0, rows_at), at::Tensor(), at::Tensor()};
  }
};

// qkv [T, 3D] of a packed batch -> context [T, D]. Attention pads per
// sequence for its matmuls only (MosaicBERT's pad_input / unpad_input):
// padding rows are zero, and the mask gives them zero attention weight.
at::Tensor attend_packed(const LayerSpec& spec, at::Tensor qkv, const AttentionContext& a,
                         const Disentangled* disentangled, bool training) {
  const PackedLayout& layout = *a.layout;
  const int64_t D = qkv.size(1) / 3, B = layout.num_sequences, Lmax = layout.max_seqlen;
  const int64_t H = spec.num_heads, Dh = D / H;
  if (a.rotary.cos.defined()) qkv = apply_rotary(qkv.view({qkv.size(0), 3, H, Dh}), a.rotary).view({-1, 3 * D});
  if (a.banded.additive.defined()) return attend_banded(spec, qkv, a.banded, training);
  const at::Tensor padded = ScatterRows::apply(qkv, layout.padded_rows, B * Lmax);
  return attend_padded(spec, padded.view({B, Lmax, 3 * D}), a.packed_mask, nullptr, disentangled, training)
      .reshape({B * Lmax, D})
      .index_select(0, layout.padded_rows);  // [T, D]
}

at::Tensor norm_if(NormKind kind, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps) {
  return weight.defined() ? norm(kind, x, weight, bias, eps) : x;
}

}  // namespace

at::Tensor lora_update(const UnitWeights& w, Slot weight, const at::Tensor& x, bool training) {
  const size_t s = static_cast<size_t>(weight);
  const at::Tensor& a = w.lora_a[s];
  const at::Tensor down = at::linear(shardtrain::dropout(x.to(a.scalar_type()), w.lora_dropout, training), a);
  return (at::linear(down, w.lora_b[s]) * w.lora_scaling).to(x.scalar_type());
}

at::Tensor linear_at(const UnitWeights& w, Slot weight, const at::Tensor& x, bool training) {
  const at::Tensor out = at::linear(x, w[weight], w[static_cast<Slot>(static_cast<int>(weight) + 1)]);
  return w.has_lora(weight) ? out + lora_update(w, weight, x, training) : out;
}

at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps) {
  const int64_t D = x.size(-1);
  if (!is_16bit(x.scalar_type())) return at::layer_norm(x, {D}, weight, bias, eps);
  return at::layer_norm(x.to(at::kFloat), {D}, weight.to(at::kFloat), bias.defined() ? bias.to(at::kFloat) : bias,
                        eps)
      .to(x.scalar_type());
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  // mean(x^2) as sum(x x) / D: ATen's mean keeps its [.., D] input for
  // backward, which would be one more activation per norm (x is kept anyway).
  const at::Tensor x32 = x.to(at::kFloat);
  const at::Tensor mean_square = (x32 * x32).sum(-1, /*keepdim=*/true) * (1.0 / static_cast<double>(x.size(-1)));
  const at::Tensor normed = (x32 * at::rsqrt(mean_square + eps)).to(x.scalar_type());
  return weight * normed;
}

at::Tensor norm(NormKind kind, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps) {
  return kind == NormKind::kRmsNorm ? rms_norm(x, weight, eps) : layer_norm(x, weight, bias, eps);
}

Rotary Rotary::for_positions(const at::Tensor& positions, int64_t head_dim, double theta, double linear_factor) {
  // inv_freq = theta^(-2i/Dh); angles in float64 and rounded once, so that long
  // positions (8192) keep fp32 accuracy (HF computes them in fp32).
  const at::Tensor exponents = at::arange(0, head_dim, 2, at::TensorOptions().dtype(at::kDouble)) / head_dim;
  at::Tensor inv_freq = at::pow(theta, exponents).reciprocal();  // [Dh / 2]
  if (linear_factor != 1.0) inv_freq = inv_freq / linear_factor;
  const at::Tensor angles = positions.to(at::kCPU, at::kDouble).unsqueeze(1) * inv_freq.unsqueeze(0);
  const at::Tensor both = at::cat({angles, angles}, 1);  // [N, Dh]
  Rotary r;
  r.cos = both.cos().to(positions.device(), at::kFloat);
  r.sin = both.sin().to(positions.device(), at::kFloat);
  return r;
}

at::Tensor encoder_layer(const LayerSpec& spec, const UnitWeights& w, const at::Tensor& hidden,
                         const AttentionContext& a, bool training) {
  auto attention = [&](const at::Tensor& x) {
    const at::Tensor qkv = expand_kv(spec, project_qkv(w, x, training));
    Disentangled disentangled;
    if (spec.disentangled && a.relative) {
      disentangled.terms = position_terms(spec, w, *a.relative, training);
      disentangled.positions = &a.relative->positions;
    }
    const Disentangled* terms = spec.disentangled ? &disentangled : nullptr;
    const at::Tensor context = a.layout ? attend_packed(spec, qkv, a, terms, training)
                                        : attend_padded(spec, qkv, a.additive_mask,
                                                        a.rotary.cos.defined() ? &a.rotary : nullptr, terms, training);
    return shardtrain::dropout(linear_at(w, Slot::kAttentionOutWeight, context, training),
                   spec.attention_out_dropout, training);
  };
  auto mlp = [&](const at::Tensor& x) {
    at::Tensor inner = linear_at(w, Slot::kMlpInWeight, x, training);
    if (w[Slot::kMlpGateWeight].defined()) {  // EuroBERT: act(gate_proj(x)) * up_proj(x)
      inner = apply_activation(spec.activation, linear_at(w, Slot::kMlpGateWeight, x, training)) * inner;
    } else if (spec.gate_second_half) {  // GTE's up_gate_proj: [up, gate]
      const int64_t I = inner.size(-1) / 2;
      inner = inner.narrow(-1, 0, I) * apply_activation(spec.activation, inner.narrow(-1, I, I));
    } else if (spec.gated_mlp) {
      const int64_t I = inner.size(-1) / 2;
      inner = apply_activation(spec.activation, inner.narrow(-1, 0, I)) * inner.narrow(-1, I, I);
    } else {
      inner = apply_activation(spec.activation, inner);
    }
    inner = shardtrain::dropout(inner, spec.mlp_inner_dropout, training);
    return shardtrain::dropout(linear_at(w, Slot::kMlpOutWeight, inner, training), spec.mlp_out_dropout, training);
  };
  if (spec.pre_norm) {
    // ModernBERT: layer 0 has no attn_norm (Identity), so its weight is undefined there.
    const at::Tensor attended = hidden + attention(norm_if(spec.norm, hidden, w[Slot::kAttentionNormWeight],
                                                           w[Slot::kAttentionNormBias], spec.norm_eps));
    return attended + mlp(norm(spec.norm, attended, w[Slot::kMlpNormWeight], w[Slot::kMlpNormBias], spec.norm_eps));
  }
  const at::Tensor attended = norm(spec.norm, attention(hidden) + hidden, w[Slot::kAttentionNormWeight],
                                   w[Slot::kAttentionNormBias], spec.norm_eps);
  return norm(spec.norm, mlp(attended) + attended, w[Slot::kMlpNormWeight], w[Slot::kMlpNormBias], spec.norm_eps);
}

}  // namespace shardtrain::detail
