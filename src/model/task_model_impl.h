// Private to src/model: TaskModel's state (model/task_model.h), which
// task_model.cpp (the plan, units and forwards) and task_model_lora.cpp (the
// LoRA adapters) share.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/encoder.h"
#include "shardtrain/core/check.h"
#include "shardtrain/model/activation_checkpoint.h"
#include "shardtrain/model/lora.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/tasks/task_spec.h"

namespace shardtrain {

namespace detail {
// HF _init_weights for one parameter (and LoRA's A), from its own generator
// seeded by (seed, name).
void init_parameter(const ParameterSpec& spec, at::Tensor& param, uint64_t seed);
}  // namespace detail

struct TaskModel::Impl {
  EncoderConfig config;
  std::vector<ParameterSpec> plan;
  std::vector<at::Tensor> tensors;  // tensors[i] is plan[i]
  std::unordered_map<std::string, size_t> index;
  std::vector<detail::UnitWeights> units;
  // The family's recipes for this config (model/family_spec.h), made once.
  std::vector<detail::LayerSpec> layer_specs;
  EmbeddingRecipe embedding;
  PooledHeadRecipe pooled_head;
  TokenHeadRecipe token_head;
  UnitHooks* hooks = nullptr;
  UnitHooks* outer_hooks = nullptr;  // set_outer_unit_hooks
  // LoRA (add_lora): the adapter, and which plan entries it froze.
  std::unique_ptr<LoraSpec> lora;
  std::vector<char> frozen;
  bool training = true;
  bool gradient_checkpointing = false;
  bool unpadded = true;
  bool banded_attention = true;  // set_banded_attention

  void before(int64_t unit) const {
    if (outer_hooks) outer_hooks->before_forward(unit);
    if (hooks) hooks->before_forward(unit);
  }
  at::Tensor after(int64_t unit, at::Tensor output) const {
    if (hooks) output = hooks->after_forward(unit, std::move(output));
    return outer_hooks ? outer_hooks->after_forward(unit, std::move(output)) : output;
  }
  // Plan entry i is trained: not a fixed tensor, not frozen by LoRA.
  bool trained(size_t i) const { return plan[i].trainable && !(i < frozen.size() && frozen[i]); }
  bool is_frozen(size_t i) const { return i < frozen.size() && frozen[i]; }
  // `index` again from `plan` (after add_lora / merge_lora change the plan).
  void reindex() {
    index.clear();
    for (size_t i = 0; i < plan.size(); ++i) index.emplace(plan[i].name, i);
  }
  int64_t head_unit() const { return static_cast<int64_t>(units.size()) - 1; }

  // Encoder layer i on `hidden`, checkpointed when gradient_checkpointing is on.
  at::Tensor run_layer(int64_t i, const at::Tensor& hidden, const detail::AttentionContext& attention) const {
    const int64_t unit = config.layer_unit(i);
    // The unit hooks stay outside the checkpoint: a sharded strategy gathers
    // the layer before its forward and again (its pre-backward hook on the
    // layer's output) before the recomputation (docs/DESIGN.md, "Activation
    // checkpointing").
    before(unit);
    // By value: a checkpointed layer calls this again in backward.
    auto forward = [spec = layer_specs[i], weights = units[unit], attention,
                    training = training](const at::Tensor& x) {
      return detail::encoder_layer(spec, weights, x, attention, training);
    };
    at::Tensor out;
    if (gradient_checkpointing && training && at::GradMode::is_enabled()) {
      // DeBERTa's relative embeddings come from another unit: the
      // recomputation's gradient for them must reach that unit's graph.
      std::vector<at::Tensor> inputs = unit_tensors(unit);
      if (attention.relative) inputs.push_back(attention.relative->embeddings);
      out = checkpointed_forward(forward, hidden, inputs);
    } else {
      out = forward(hidden);
    }
    return after(unit, std::move(out));
  }

  // DeBERTa with relative attention: the relative embeddings unit (unit 1,
  // between the embeddings and layer 0, with its hooks unless `hooked` is
  // false) and the relative positions of `length` tokens, which every layer
  // reads; null for the other families.
  std::shared_ptr<const detail::RelativeContext> relative_context(int64_t length, const at::Device& device,
                                                                  bool hooked = true) const {
    if (!config.has_relative_unit()) return nullptr;
    const int64_t unit = config.layer_unit(0) - 1;
    auto relative = std::make_shared<detail::RelativeContext>();
    if (hooked) before(unit);
    relative->embeddings = detail::relative_embeddings(config, units[static_cast<size_t>(unit)]);
    if (hooked) relative->embeddings = after(unit, relative->embeddings);
    relative->positions = detail::RelativePositions::build(config, length, device);
    return relative;
  }

  std::vector<at::Tensor> unit_tensors(int64_t unit) const {
    std::vector<at::Tensor> out;
    for (size_t i = 0; i < plan.size(); ++i)
      if (plan[i].unit == unit && trained(i)) out.push_back(tensors[i]);
    return out;
  }

  // The head unit on the last hidden states, pooled by `pool` (first token or
  // masked mean of token-wise states).
  at::Tensor head(const std::function<at::Tensor(const at::Tensor&)>& pool_first,
                  const std::function<at::Tensor(const at::Tensor&)>& pool_mean, const at::Tensor& hidden) const {
    const detail::UnitWeights& w = units[head_unit()];
    before(head_unit());
    if (task_rules(config.task).head_on_tokens())  // [B, L, C] or [T, C]
      return after(head_unit(), detail::token_head(config, token_head, w, hidden, training));
    const PooledHeadRecipe& recipe = pooled_head;
    // final_norm is token-wise: for first-token pooling normalise only the
    // first tokens (the same values); the mean averages the normalised states.
    auto final_norm = [&](const at::Tensor& x) {
      if (!recipe.final_norm) return x;
      return detail::norm(recipe.final_norm_kind, x, w[Slot::kFinalNormWeight], w[Slot::kFinalNormBias],
                          config.layer_norm_eps);
    };
    // EuroBERT's late pooling: the head on every token, then the mean of the real tokens' logits.
    if (recipe.late_pooling)
      return after(head_unit(), pool_mean(detail::classifier_head(config, pooled_head, w, final_norm(hidden), training)));
    const at::Tensor pooled = recipe.mean_pooling ? pool_mean(final_norm(hidden)) : final_norm(pool_first(hidden));
    return after(head_unit(), detail::classifier_head(config, pooled_head, w, pooled, training));
  }

  void check_length(int64_t length) const {
    const int64_t limit = config.max_sequence_length();
    if (length > limit)
      throw Error("sequence length " + std::to_string(length) + " exceeds the " + std::to_string(limit) +
                  " positions of this " + config.model_type + " model (max_position_embeddings " +
                  std::to_string(config.max_position_embeddings) + "); lower data.max_length");
  }
};

}  // namespace shardtrain
