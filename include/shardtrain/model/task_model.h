// An encoder with a task head in LibTorch, numerically equal to Hugging
// Face transformers' eager <Family>For<Task> (SequenceClassification,
// TokenClassification, MultipleChoice, QuestionAnswering: config.task; the
// task's logits' shape and loss are its spec's, tasks/task_spec.h) for BERT,
// RoBERTa (XLM-R, CamemBERT), DistilBERT, ELECTRA, ModernBERT and
// DeBERTa-v2 / v3 (docs/DESIGN.md, "Model families" and "Tasks").
//
//   EncoderConfig config = EncoderConfig::from_file("roberta-base/config.json");
//   TaskModel model(config);
//   model.init_weights(/*seed=*/42);                       // HF _init_weights
//   at::Tensor logits = model.forward(input_ids, token_type_ids, attention_mask);  // [B, C]
//   at::Tensor loss = model.loss(logits, labels);
//
// One encoder core serves every family: a family contributes its embeddings,
// its head and its parameter names (its FamilySpec, model/family_spec.h), not
// a copy of the encoder. The parameters are exactly parameter_plan(config)'s, under
// HF's names in HF's order, so weights move to and from HF checkpoints by name
// (hf_folder.h).
//
// Unpadded (packed) batches, as MosaicBERT and ModernBERT's reference run
// them: the B sequences' real tokens back to back (T = sum of the lengths;
// data/collator.h's pack_batch builds them). Embeddings, every Linear, norm,
// activation and dropout run on the T real tokens only; attention runs per
// sequence. The logits equal forward()'s on the padded batch (to fp32
// rounding; tests/test_bert_packed.cpp):
//
//   at::Tensor logits = model.forward_packed(input_ids, token_type_ids, position_ids,
//                                            cu_seqlens, max_seqlen);    // [B, C]
//
// The model knows nothing about ranks: it is a UnitModel (unit_model.h), and
// parallel strategies gather and free each unit's parameters from outside
// through the unit hooks. This header is light (no torch::nn): the module is
// a set of parameter tensors and functions over them, in src/model/.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "shardtrain/data/collator.h"
#include "shardtrain/model/encoder_config.h"
#include "shardtrain/model/lora.h"
#include "shardtrain/model/parameter_plan.h"
#include "shardtrain/model/unit_model.h"

namespace shardtrain {

class TaskModel : public UnitModel {
 public:
  // Allocates the parameters on the CPU in fp32 (uninitialised: call
  // init_weights() or load weights). Validates `config`, and throws Error
  // before allocating when its parameters do not fit in the available host
  // memory (core/memory.h), naming the sizes.
  explicit TaskModel(const EncoderConfig& config);
  ~TaskModel() override;
  TaskModel(const TaskModel&) = delete;
  TaskModel& operator=(const TaskModel&) = delete;

  const EncoderConfig& config() const;

  // input_ids [B, L] int64; token_type_ids [B, L] int64 (undefined = all 0;
  // ignored by families without token types); attention_mask [B, L] (1 keep,
  // 0 padding; any dtype; undefined = all 1). Returns logits [B, C] in the
  // parameters' dtype ([B, L, C] for token classification, [B, 1] for
  // multiple choice: one logit per sequence, i.e. per choice). Dropout is active only in train() mode. Throws
  // shardtrain::Error if L exceeds the model's positions.
  at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& token_type_ids = {},
                     const at::Tensor& attention_mask = {});
  // The same model on a packed batch (see the top of this file): input_ids
  // [T] int64; token_type_ids [T] (undefined = all 0); position_ids [T]
  // (undefined = 0..n_b-1 within each sequence; RoBERTa computes its own from
  // the ids, as HF does); cu_seqlens [B+1] int64, sequence b = tokens
  // [cu_seqlens[b], cu_seqlens[b+1]); max_seqlen = the longest sequence.
  // Returns logits [B, C] ([T, C] for token classification), equal to
  // forward() on the padded batch. The unit
  // hooks run around the same units, with [T, D] outputs for the embeddings
  // and the layers. Throws shardtrain::Error for inconsistent shapes or
  // cu_seqlens, or a sequence longer than the model's positions.
  at::Tensor forward_packed(const at::Tensor& input_ids, const at::Tensor& token_type_ids,
                            const at::Tensor& position_ids, const at::Tensor& cu_seqlens, int64_t max_seqlen);
  // The logits of a collated batch: forward_packed() on pack_batch(batch),
  // which holds only the real tokens (moved to the batch's device: a small
  // host round trip on a GPU), or with set_unpadded(false) (model.unpadded)
  // forward() on its padded tensors. Both give the same logits to fp32
  // rounding; in training the dropout masks differ (drawn per token kept).
  // In HF's shapes for the task: sequence classification [B, C]; token
  // classification [B, L, C] (zeros at padding when packed); multiple choice
  // [B, choices] (the batch's rows are B x batch.num_choices sequences).
  at::Tensor forward_batch(const Batch& batch);
  void set_unpadded(bool on);
  bool unpadded() const;
  // Sliding-window (ModernBERT local) layers of forward_packed compute in
  // blocks against their band of keys (cost linear in the length) when the
  // longest sequence exceeds a block's keys; false computes them against every
  // key with the window as a mask, as HF's eager code does (same logits; for
  // tests and benchmarks).
  void set_banded_attention(bool on);
  // On the CPU (LibTorch 1.x kernel), a layer's attention whose score
  // matrices hold more than `score_elements` elements (B x H x L x keys)
  // computes a block of query rows at a time and keeps none of them for
  // backward, recomputing them there: memory that grows with L instead of
  // L^2 (a 12-head global layer at 8192 tokens would hold 3.2 GB per score
  // tensor), for one matmul more in backward. Same values to fp32 rounding,
  // same dropout masks. Default 2^24 (64 MiB of fp32 scores); negative
  // restores it, 0 blocks every attention (benchmarks). A block holds at most
  // 2^20 scores, or score_elements when that is smaller and not 0 (tests: 1
  // gives one query row per block).
  void set_attention_block_threshold(int64_t score_elements);
  // DeBERTa-v2's disentangled attention on the CPU: its fused kernel (true,
  // the default) or the plain ATen ops other devices run (false), which give
  // the same values; for tests and benchmarks.
  void set_disentangled_attention_kernel(bool on);
  // HF's gradient_checkpointing: in training with autograd on, each encoder
  // layer keeps only its input and recomputes its forward in backward
  // (model/activation_checkpoint.h). Gradients equal the plain run's.
  void set_gradient_checkpointing(bool on);
  bool gradient_checkpointing() const;
  // The mean loss as HF computes it for the task (forward_batch's logits):
  // token classification: cross-entropy over the tokens, labels int64 [B, L]
  // (-100 ignored); multiple choice: cross-entropy over the choices, labels
  // int64 [B]; sequence classification by config().problem_type:
  //   regression (num_labels == 1): MSE(logits.squeeze(), labels.squeeze()), labels float [B];
  //   single-label: cross-entropy, labels int64 [B] (-100 ignored);
  //   multi-label: BCE-with-logits, labels float [B, C].
  at::Tensor loss(const at::Tensor& logits, const at::Tensor& labels) const;

  // The pieces alone, for tests and benchmarks (no unit hooks): encoder layer
  // i on padded hidden states [B, L, D] with HF's additive mask [B, 1, 1, L]
  // (0 keep, finfo.min padding), and the embeddings unit on ids, token types
  // and positions of one shape ([B, L] or [T]) -> [..., D].
  at::Tensor forward_layer(int64_t i, const at::Tensor& hidden, const at::Tensor& additive_mask);
  at::Tensor forward_embeddings(const at::Tensor& input_ids, const at::Tensor& token_type_ids,
                                const at::Tensor& positions);

  // Training mode (dropout on) or evaluation mode, as torch.nn.Module.train().
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const;
  // Moves or casts every parameter (and fixed tensor), keeping the tensor
  // objects: state_dict()'s aliases stay valid.
  void to(at::ScalarType dtype);
  void to(const at::Device& device);
  // Drops every parameter's .grad.
  void zero_grad();

  // HF _init_weights on every parameter, reproducibly from `seed` (independent
  // of the global torch seed; each parameter's values depend only on the seed
  // and its name): as ParameterSpec says (normal / truncated normal, zeros,
  // ones, the padding row zeroed).
  void init_weights(uint64_t seed);
  // The same init, only for the parameters whose HF names are in `names`.
  void init_weights(uint64_t seed, const std::vector<std::string>& names);

  // The parameter (or fixed tensor) with HF name `name`; Error if there is none.
  at::Tensor parameter(const std::string& name) const;
  // The trainable parameters, in state-dict order.
  std::vector<at::Tensor> parameters() const;
  // The trainable parameters of one unit, in order.
  std::vector<at::Tensor> unit_parameters(int64_t unit) const;
  // Tensors that are part of the HF state dict but not trained (DistilBERT's
  // sinusoidal position embeddings): exported, never checkpointed.
  std::vector<std::pair<std::string, at::Tensor>> fixed_tensors() const;

  // ---- LoRA (model/lora.h; docs/DESIGN.md, "LoRA") ----
  // Adds `lora`'s adapters (A by lora.init from `seed`, as init_weights draws
  // each parameter from (seed, name); B zeros) and freezes every parameter
  // outside lora.modules_to_save: the frozen ones lose requires_grad, and
  // state_dict() / parameters() list only the trained ones (the adapters and
  // the modules to save, in lora_trainable_plan's order). Once per model, on
  // the CPU in fp32, before a strategy wraps it.
  void add_lora(const LoraSpec& lora, uint64_t seed);
  // The adapter added, or nullptr.
  const LoraSpec* lora() const;
  // The frozen parameters (name, tensor), in the plan's order; empty without LoRA.
  std::vector<std::pair<std::string, at::Tensor>> frozen_state_dict() const;
  // The unit of any tensor of the model (trained, frozen, fixed or an adapter's).
  int64_t plan_unit_of(const std::string& name) const;
  // Every tensor of the model by name, frozen, trained and LoRA (for export and tests).
  std::vector<std::pair<std::string, at::Tensor>> all_tensors() const;
  // Casts the frozen parameters to `dtype` (mixed precision: the forward reads
  // the 16-bit copy; no fp32 master of them exists, they never change).
  void frozen_to(at::ScalarType dtype);
  // Folds each adapter into its Linear, W += scaling B A (in float64, rounded
  // once), and removes the adapters: the model is an ordinary one again,
  // every parameter trainable (export --merge).
  void merge_lora();
  // Hooks run outside the strategy's (before its before_forward, after its
  // after_forward): the frozen base's own sharding (parallel/frozen_shards.h).
  void set_outer_unit_hooks(UnitHooks* hooks);

  // UnitModel: config().num_units() units (the embeddings, DeBERTa's relative
  // embeddings, the layers, the head); parameters under HF names, in the
  // plan's order (model/parameter_plan.h).
  int64_t num_units() const override;
  int64_t unit_of(const std::string& name) const override;
  void set_unit_hooks(UnitHooks* hooks) override;
  std::vector<std::pair<std::string, at::Tensor>> state_dict() const override;

  struct Impl;  // src/model/classifier_impl.h

 private:
  std::unique_ptr<Impl> impl_;
};

// The values of a fixed (untrained) tensor of the plan, computed from its
// spec: DistilBERT's sinusoidal position embeddings, fp32 on the CPU.
at::Tensor fixed_tensor(const ParameterSpec& spec);

// Applies HF activation `name` (see EncoderConfig::hidden_act) to x.
at::Tensor apply_activation(const std::string& name, const at::Tensor& x);

}  // namespace shardtrain
