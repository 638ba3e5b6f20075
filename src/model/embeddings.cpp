// The embeddings unit of every family (docs/DESIGN.md, "Model families").
// Shapes: see model/encoder.h.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "model/encoder.h"
#include "shardtrain/model/dropout.h"
#include "shardtrain/model/family_spec.h"

namespace shardtrain::detail {
namespace {

// The word-embedding lookup's gradient: a lookup touches at most one row per
// token, yet a dense [V, E] gradient (bert-base-cased: 28996 x 768, 89 MB) is
// zero-filled, scattered into and then added into .grad on every backward.
// When the weight already has a dense .grad at backward time (every strategy
// keeps one, a view into its flat gradient buffer), the lookup hands autograd
// a sparse gradient instead, which autograd adds in place into that .grad, row
// by row. Otherwise (no .grad yet) the gradient is dense, as in PyTorch, so
// .grad is never left sparse. Both give the same values. The weight is kept in
// saved_data, not save_for_backward: backward reads only its .grad (which a
// sharded strategy attaches just before this unit's backward), never its
// values, so an in-place update or a freed gathered copy must not trip
// autograd's version check.
struct WordLookup : public torch::autograd::Function<WordLookup> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& weight, const at::Tensor& ids,
                            int64_t padding_idx) {
    ctx->saved_data["weight"] = weight;
    ctx->saved_data["ids"] = ids;
    ctx->saved_data["num_words"] = weight.size(0);
    ctx->saved_data["padding_idx"] = padding_idx;
    return at::embedding(weight, ids, padding_idx);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const at::Tensor weight = ctx->saved_data["weight"].toTensor();
    const at::Tensor& existing = weight.grad();
    // With create_graph autograd adds out of place; keep the plain dense form there.
    const bool sparse = existing.defined() && existing.layout() == at::kStrided && !at::GradMode::is_enabled();
    at::Tensor grad = at::embedding_backward(grad_outputs[0], ctx->saved_data["ids"].toTensor(),
                                             ctx->saved_data["num_words"].toInt(),
                                             ctx->saved_data["padding_idx"].toInt(), false, sparse);
    return {grad, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor embed(const EncoderConfig& c, const EmbeddingRecipe& recipe, const UnitWeights& w,
                 const at::Tensor& input_ids, const at::Tensor& token_type_ids, const at::Tensor& positions,
                 bool training) {
  at::Tensor x = WordLookup::apply(w[Slot::kWordEmbeddings], input_ids,
                                   c.word_padding_row ? c.pad_token_id : -1);  // [..., E]
  const double p = recipe.dropout;
  auto add_positions = [&] {
    if (!recipe.absolute_positions) return;
    const int64_t padding = recipe.positions_after_padding ? c.pad_token_id : -1;
    x = x + at::embedding(w[Slot::kPositionEmbeddings], positions, padding);
  };
  // HF's order: words + token types, then + positions (BERT, RoBERTa,
  // ELECTRA); DeBERTa: words + positions + token types.
  if (recipe.positions_before_types) add_positions();
  if (c.has_token_types()) x = x + at::embedding(w[Slot::kTokenTypeEmbeddings], token_type_ids);
  if (!recipe.positions_before_types) add_positions();
  if (recipe.norm) x = layer_norm(x, w[Slot::kEmbeddingNormWeight], w[Slot::kEmbeddingNormBias], c.layer_norm_eps);
  x = shardtrain::dropout(x, p, training);
  // ELECTRA: embedding_size -> hidden_size, part of this unit.
  if (recipe.projection)
    x = linear_at(w, Slot::kEmbeddingProjectWeight, x, training);
  return x;
}

at::Tensor roberta_positions(const at::Tensor& input_ids, int64_t pad_token_id, const PackedLayout* layout) {
  const at::Tensor real = input_ids.ne(pad_token_id).to(at::kLong);
  at::Tensor count;
  if (!layout) {
    count = real.cumsum(1);  // [B, L]
  } else {
    // Per-sequence running count over the packed tokens: the global cumsum
    // minus its value just before each sequence's first token.
    const at::Tensor total = real.cumsum(0);  // [T]
    const at::Tensor before = (total - real).index_select(0, layout->first_tokens);  // [B]
    count = total - before.index_select(0, layout->sequence_of);
  }
  return count * real + pad_token_id;
}

}  // namespace shardtrain::detail
