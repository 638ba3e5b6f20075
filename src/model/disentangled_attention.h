// Private to src/model: DeBERTa-v2's disentangled self-attention
// (docs/DESIGN.md, "DeBERTa-v2"), the attention of transformers'
// DisentangledSelfAttention:
//
//   s = sqrt(Dh x (1 + number of position terms))
//   scores[i, j] = q_i . k_j / s                          content
//                + q_i . pk[d(i, j)] / s                  "c2p": content to position
//                + k_j . pq[d(i, j)] / s                  "p2c": position to content
//   context = dropout(softmax(scores + additive_mask)) v
//
// q, k, v [B, H, L, Dh] (a padded batch, or a packed one padded per sequence,
// so that positions count within each sequence); pk, pq [H, R, Dh] the
// relative embeddings' rows the batch reaches, projected by the layer's key /
// query projections (PositionTerms); d(i, j) from RelativePositions
// (model/encoder.h). The p2c term of HF (key j against query position
// -bucket(j - i)) reads the same row d(i, j), since buckets are odd in i - j.
//
// Every product is scaled before its matmul (q / s, pq / s): transformers
// divides the key before the content matmul so that fp16 scores do not
// overflow; here the position products get the same treatment.
//
// On the CPU one autograd node computes a (batch, head) matrix at a time
// across the intra-op threads (as model/attention.h's kernel, for the same
// reason: ATen's bmm forks a BLAS team per small matrix), with the position
// products, their gathers and, in backward, their scatter-adds inside that
// matrix's work: nothing of size B x H x L x R is made. Above
// `block_threshold` score elements it keeps no probabilities for backward and
// recomputes each matrix's there (model/attention.h's rule, which the memory
// estimate follows). Other devices, and the CPU with cpu_attention_kernel
// off, run the same math as plain ATen ops.
#pragma once

#include <ATen/core/Tensor.h>

#include "model/encoder.h"

namespace shardtrain::detail {

// One layer's projections of the relative embeddings: [H, R, Dh] each,
// undefined when the layer has no such term; `query` already divided by s.
struct PositionTerms {
  at::Tensor query;  // p2c: query_proj (share_att_key) or pos_query_proj of the rows, / s
  at::Tensor key;    // c2p: key_proj (share_att_key) or pos_key_proj of the rows
};

// The rows of `relative` the positions reach, dropped out (pos_dropout) and
// projected with the layer's weights `w`.
PositionTerms position_terms(const LayerSpec& spec, const UnitWeights& w, const RelativeContext& relative,
                             bool training);

// The attention above: q, k, v [B, H, L, Dh], additive_mask broadcastable to
// [B, H, L, L] -> context [B, H, L, Dh]. `positions` may be null when the
// layer has no position terms (relative_attention false).
at::Tensor disentangled_attention(const LayerSpec& spec, const at::Tensor& q, const at::Tensor& k,
                                  const at::Tensor& v, const at::Tensor& additive_mask, const PositionTerms& terms,
                                  const RelativePositions* positions, bool training);

}  // namespace shardtrain::detail
