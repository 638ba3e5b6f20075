// Private to src/model: the attention matmuls of BertLayer.
//
//   context = dropout(softmax(q k^T / sqrt(Dh) + additive_mask)) v
//
// q [B, H, L, Dh], k and v [B, H, Lk, Dh] (any strides; Lk = L for self-attention),
// additive_mask broadcastable to [B, H, L, Lk] -> [B, H, L, Dh].
// The math of HF's eager attention, op for op (the same scale, mask, softmax
// and dropout ops; the dropout mask comes from model/dropout.h).
//
// Why not at::matmul: on the CPU, ATen's bmm runs one BLAS call per (batch,
// head) matrix, B x H of them, each a tiny [L, Dh] x [Dh, L] product that BLAS
// parallelises over the intra-op threads on its own: a thread team forks and
// joins for every one (bert-base at batch 16: 192 products per matmul, 6
// matmuls per layer). With 2 threads that took 10-40x the single-thread time
// (benchmarks/README.md, "attention matmuls"). Here each thread takes a
// contiguous share of the B x H products and runs them with single-threaded
// BLAS (inside an OpenMP region OpenBLAS and ATen run serially), so the team
// forks once per matmul. Forward and backward are one autograd function with
// the same formulas autograd would use. Other devices (CUDA) and LibTorch 2.x
// (scaled_dot_product_attention) do not use this path. Long sequences run in
// blocks of query rows (block_threshold below).
#pragma once

#include <ATen/core/Tensor.h>

namespace shardtrain {
namespace detail {

// block_threshold: on the CPU under LibTorch 1.x, an attention whose scores
// (B x H x L x Lk elements) exceed it runs in blocks of query rows and keeps
// no score matrix for backward (LayerSpec::attention_block_threshold).
at::Tensor scaled_dot_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& additive_mask, double dropout_p, bool training,
                                int64_t block_threshold);

}  // namespace detail
}  // namespace shardtrain
