// Private to src/model: the pieces every family's classifier is made of
// (docs/DESIGN.md, "Model families"): the embeddings, the one encoder layer,
// the head; each a function over a unit's weights (the parameter tensors by
// slot, model/parameter_plan.h) that runs the family's recipe
// (model/family_spec.h), so that a family is a parameter plan and recipes, not
// a copy of the code.
//
// Shapes: B batch, L sequence length, T packed tokens, Lmax the longest
// sequence of a packed batch, D hidden, E embedding width, H heads, Dh = D / H,
// I intermediate, C labels.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "shardtrain/model/encoder_config.h"
#include "shardtrain/model/family_spec.h"
#include "shardtrain/model/parameter_plan.h"

namespace shardtrain::detail {

// The parameter tensors of one unit by slot (undefined where the family has none).
struct UnitWeights {
  std::array<at::Tensor, static_cast<size_t>(Slot::kCount)> by_slot;
  const at::Tensor& operator[](Slot s) const { return by_slot[static_cast<size_t>(s)]; }
  at::Tensor& operator[](Slot s) { return by_slot[static_cast<size_t>(s)]; }
  // LoRA (model/lora.h): the adapter of the Linear whose weight is at a slot
  // (A [r, in], B [out, r]; undefined where it has none), its scaling and the
  // dropout on its input.
  std::array<at::Tensor, static_cast<size_t>(Slot::kCount)> lora_a, lora_b;
  double lora_scaling = 0.0, lora_dropout = 0.0;
  bool has_lora(Slot weight) const { return lora_a[static_cast<size_t>(weight)].defined(); }
};

// The Linear whose weight is at `weight` (its bias at the next slot) on x,
// with its LoRA update when it has one: x W^T + b + scaling B(A(dropout(x))),
// as PEFT's lora.Linear computes it.
at::Tensor linear_at(const UnitWeights& w, Slot weight, const at::Tensor& x, bool training);
// The LoRA update alone: scaling B(A(dropout(x))) [..., out].
at::Tensor lora_update(const UnitWeights& w, Slot weight, const at::Tensor& x, bool training);

// Where the tokens of a packed batch sit in the padded layout that attention
// uses; built once per forward and shared by every layer.
struct PackedLayout {
  int64_t num_sequences = 0;  // B
  int64_t max_seqlen = 0;     // Lmax
  at::Tensor padded_rows;     // [T] int64: token t's row in the padded [B * Lmax] layout
  at::Tensor first_tokens;    // [B] int64: each sequence's first token in the packed order
  at::Tensor sequence_of;     // [T] int64: the sequence each token belongs to
  at::Tensor lengths;         // [B] int64
  at::Tensor additive_mask;   // [B, 1, 1, Lmax]: 0 for real tokens, finfo.min for padding

  // From cu_seqlens [B+1] (any device; read on the host). Throws Error for
  // cu_seqlens that do not start at 0, decrease, hold an empty sequence, or a
  // sequence longer than max_seqlen. Tensors are made on `device`, the mask in `dtype`.
  static PackedLayout from_cu_seqlens(const at::Tensor& cu_seqlens, int64_t max_seqlen, at::ScalarType dtype,
                                      const at::Device& device);
  // Each token's position inside its sequence, 0-based: [T] int64.
  at::Tensor positions() const;
};

// HF's extended attention mask of a [B, L] keep mask (1 attended, 0 padding):
// [B, 1, 1, L], 0 where attended and finfo(dtype).min at padding.
at::Tensor extended_attention_mask(const at::Tensor& keep, at::ScalarType dtype);
// The same mask, restricted to keys within `half_window` of each query:
// [B, 1, L, L] (ModernBERT's sliding_window_mask).
at::Tensor windowed_attention_mask(const at::Tensor& extended_mask, int64_t half_window);

// Sliding-window attention over a packed batch in blocks (docs/DESIGN.md,
// "Model families"): the T tokens are cut into blocks of `block` queries;
// block b attends to the `width` = block + 2 half_window keys around it
// (rows [b block - half_window, (b + 1) block + half_window) of the packed
// keys), so a local layer costs T x width, not B x Lmax^2. `additive`
// [nb, 1, block, width] is 0 where a key is within half_window of the query
// and in the query's own sequence, finfo.min elsewhere (a padding query row,
// past T, attends only to its own zero key). Built once per forward and
// shared by every local layer.
struct BandedMask {
  int64_t block = 0, half_window = 0;
  at::Tensor additive;
  int64_t width() const { return block + 2 * half_window; }
};
// True when blocks cost less than attention padded per sequence: the longest
// sequence is longer than one block's keys (banded_attention_pays,
// shardtrain/model/encoder_config.h, which also gives the block size).
bool banded_pays(const PackedLayout& layout, int64_t half_window);
BandedMask banded_attention_mask(const PackedLayout& layout, int64_t half_window, at::ScalarType dtype);

// How one encoder layer computes: the family's recipe (model/family_spec.h).
using shardtrain::LayerSpec;

// DeBERTa-v2's relative positions of a batch's L (padded) or Lmax (packed)
// positions: query i and key j of one sequence are d(i, j) = clamp(bucket(i -
// j) + span, 0, 2 span - 1) apart in the relative embeddings' rows (HF's
// build_relative_position and make_log_bucket_position; bucket(r) = r when
// position_buckets <= 0). Only rows [first_row, first_row + num_rows) are
// reached (at most 2 L - 1); the index counts from first_row.
struct RelativePositions {
  int64_t first_row = 0, num_rows = 0;
  at::Tensor index;    // [L, L] int64: d(i, j) - first_row
  at::Tensor index_t;  // [L, L] int64: index transposed (contiguous), for the p2c term

  static RelativePositions build(const EncoderConfig& config, int64_t length, const at::Device& device);
};

// What every DeBERTa layer of one forward shares: the relative embeddings
// unit's output and the positions. Shared: checkpointed layers keep it.
struct RelativeContext {
  at::Tensor embeddings;  // [2 span, D]: rel_embeddings, normalised when norm_rel_ebd is layer_norm
  RelativePositions positions;
};

// RoPE tables for positions [N] and head size Dh: cos, sin [N, Dh] in fp32;
// positions divided by linear_factor (LayerSpec::rope_linear_factor).
struct Rotary {
  at::Tensor cos, sin;
  static Rotary for_positions(const at::Tensor& positions, int64_t head_dim, double theta,
                              double linear_factor = 1.0);
};

// Inputs of a layer's attention: the padded [B, L, D] case (mask) or the
// packed [T, D] case (layout), with the RoPE tables when the family uses them.
struct AttentionContext {
  at::Tensor additive_mask;             // padded: [B, 1, 1, L] or [B, 1, L, L]
  // Packed. Shared: a checkpointed layer keeps its context for the
  // recomputation in backward, after forward_packed has returned.
  std::shared_ptr<const PackedLayout> layout;
  at::Tensor packed_mask;               // packed: the layout's mask, windowed for local layers
  BandedMask banded;                    // packed local layers, when banded_pays: used instead of packed_mask
  Rotary rotary;                        // [B * L or T, Dh], rows in the hidden states' token order
  std::shared_ptr<const RelativeContext> relative;  // DeBERTa-v2 (relative_attention)
};

// One encoder layer: hidden [B, L, D] or [T, D] -> the same shape.
at::Tensor encoder_layer(const LayerSpec& spec, const UnitWeights& w, const at::Tensor& hidden,
                         const AttentionContext& attention, bool training);

// The embeddings unit as `recipe` (the family's, for `config`) says: ids,
// token types, positions of the same shape ([B, L] or [T]) -> [..., D]
// (ELECTRA's embeddings_project included). Token types are ignored by
// families without them; positions by ModernBERT.
at::Tensor embed(const EncoderConfig& config, const EmbeddingRecipe& recipe, const UnitWeights& w,
                 const at::Tensor& input_ids, const at::Tensor& token_type_ids, const at::Tensor& positions,
                 bool training);

// RoBERTa's position ids (create_position_ids_from_input_ids): per sequence,
// pad + the running count of non-pad tokens, pad at pad tokens. ids [B, L],
// or [T] with the packed layout.
at::Tensor roberta_positions(const at::Tensor& input_ids, int64_t pad_token_id, const PackedLayout* layout);

// DeBERTa-v2's relative embeddings unit (unit 1): rel_embeddings through
// encoder.LayerNorm (norm_rel_ebd), or a copy of them, so that the unit's
// output is an activation a sharded strategy may free the unit under
// (docs/DESIGN.md, "DeBERTa-v2") -> [2 span, D].
at::Tensor relative_embeddings(const EncoderConfig& config, const UnitWeights& w);

// The head unit of a sequence-level task (sequence classification, multiple
// choice) on the pooled input: pooled [B, D] -> logits [B, C] ([B, 1] per
// choice), as `head` (the family's recipe for `config`) says. For ModernBERT,
// `pooled` is already final-normed and pooled.
at::Tensor classifier_head(const EncoderConfig& config, const PooledHeadRecipe& head, const UnitWeights& w,
                           const at::Tensor& pooled, bool training);
// The head unit of token classification on the last hidden states [..., D]
// -> [..., C] (ModernBERT's final_norm included).
at::Tensor token_head(const EncoderConfig& config, const TokenHeadRecipe& head, const UnitWeights& w,
                      const at::Tensor& hidden, bool training);

// LayerNorm in float32 for 16-bit activations (and parameters), cast back, as
// torch.autocast runs layer_norm; bias may be undefined (norm_bias = false).
at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps);
// RMSNorm as transformers' LlamaRMSNorm: x / sqrt(mean(x^2) + eps) in
// float32, cast back to x's dtype, times weight.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);
// The norm `kind` (RMSNorm has no bias).
at::Tensor norm(NormKind kind, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps);

}  // namespace shardtrain::detail
