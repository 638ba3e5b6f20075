// BERT for sequence classification in LibTorch, numerically equal to Hugging Face
// transformers' BertForSequenceClassification (eager attention, absolute positions).
//
//   BertConfig config = BertConfig::from_file("bert-base-cased/config.json");
//   auto model = std::make_shared<BertForSequenceClassification>(config);
//   model->init_weights(/*seed=*/42);                       // HF _init_weights
//   at::Tensor logits = model->forward(input_ids, token_type_ids, attention_mask);  // [B, C]
//   at::Tensor loss = model->loss(logits, labels);
//
// Unpadded (packed) batches, as MosaicBERT and NVIDIA's fine-tuning kernels run
// them: the B sequences' real tokens back to back (T = sum of the lengths;
// data/collator.h's collate_packed builds them). Embeddings, every Linear,
// LayerNorm, GELU and dropout run on the T real tokens only; attention runs per
// sequence, with q/k/v scattered into a padded [B, H, Lmax, Dh] layout for the
// two attention matmuls and the context gathered back. The logits equal
// forward()'s on the padded batch (to fp32 rounding; tests/test_bert_packed.cpp):
//
//   at::Tensor logits = model->forward_packed(input_ids, token_type_ids, position_ids,
//                                             cu_seqlens, max_seqlen);    // [B, C]
//
// Both paths project q, k and v with one matmul (the three weights
// concatenated), and the word-embedding lookup adds its gradient into an
// existing dense .grad row by row (a sparse gradient) instead of building a
// dense [V, D] one: see BertEmbeddings.
//
// named_parameters() yields exactly HF's state-dict keys, in HF's order
// ("bert.embeddings.word_embeddings.weight", ..., "classifier.bias"), so weights
// move to and from HF checkpoints by name (hf_folder.h). The model knows nothing
// about ranks: it is a UnitModel (unit_model.h), and parallel strategies gather
// and free each unit's parameters from outside through the unit hooks.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "shardtrain/data/collator.h"
#include "shardtrain/model/unit_model.h"
#include "shardtrain/core/limits.h"

namespace shardtrain {

// The fields of a HF BertConfig that shape the model, with HF's defaults
// (bert-base). Parsed from config.json; unknown keys are kept and written back.
struct BertConfig {
  int64_t vocab_size = 30522;
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t intermediate_size = 3072;
  // One of HF's ACT2FN names: gelu (erf), gelu_python, gelu_new, gelu_pytorch_tanh,
  // gelu_accurate, gelu_fast, quick_gelu, gelu_10, relu, relu2, relu6, leaky_relu,
  // silu, swish, mish, tanh, sigmoid, linear, laplace.
  std::string hidden_act = "gelu";
  double hidden_dropout_prob = 0.1;
  double attention_probs_dropout_prob = 0.1;
  double classifier_dropout = -1.0;  // < 0: HF's null, i.e. use hidden_dropout_prob
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;
  double initializer_range = 0.02;
  double layer_norm_eps = 1e-12;
  int64_t pad_token_id = 0;
  std::string position_embedding_type = "absolute";  // the only one supported
  int64_t num_labels = 2;
  std::vector<std::string> id2label;  // id2label[i] = name of label i; size num_labels
  // "" (infer as HF does: regression when num_labels == 1, else single- or
  // multi-label by the labels' dtype), "regression", "single_label_classification",
  // "multi_label_classification".
  std::string problem_type;
  // Keys of config.json this struct does not model (e.g. "transformers_version"),
  // as a JSON object text, written back by to_json().
  std::string extra_json = "{}";

  // Parses a HF config.json text; `source` names the file in errors. Missing
  // keys take HF defaults; wrong types and invalid values throw shardtrain::Error
  // naming the key. The result is validated.
  static BertConfig from_json(const std::string& text, const std::string& source = "config.json");
  static BertConfig from_file(const std::string& path);
  // The config as HF writes it (model_type "bert", architectures
  // ["BertForSequenceClassification"], id2label/label2id, num_labels), pretty-printed.
  std::string to_json() const;
  // Throws shardtrain::Error naming the key for any invalid value
  // (hidden_size % num_attention_heads != 0, non-positive sizes, p outside [0, 1),
  // vocab_size beyond 32-bit token ids, more than kMaxNumLabels labels, more
  // than 2^50 parameters, ...).
  void validate(const std::string& source = "config") const;

  // Sets num_labels and resets id2label to HF's default names "LABEL_<i>".
  // Error when n is outside [1, kMaxNumLabels].
  void set_num_labels(int64_t n);
  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  double effective_classifier_dropout() const {
    return classifier_dropout >= 0 ? classifier_dropout : hidden_dropout_prob;
  }
  // Number of trainable parameters of BertForSequenceClassification for this
  // config (108,311,810 for bert-base with 2 labels).
  int64_t num_parameters() const;
};

// The configuration HF uses for "bert-base-cased" (vocab 28996), with `num_labels`.
BertConfig bert_base_cased_config(int64_t num_labels = 2);

// word + position + token-type embeddings, then LayerNorm and dropout.
// Parameters: word_embeddings.weight [V, D], position_embeddings.weight [P, D],
// token_type_embeddings.weight [T, D], LayerNorm.{weight,bias} [D].
//
// The word-embedding gradient: a lookup's gradient touches at most one row per
// token, yet a dense [V, D] gradient (bert-base-cased: 28996 x 768, 89 MB) is
// zero-filled, scattered into and then added into .grad on every backward.
// When the weight already has a dense .grad at backward time (every strategy
// keeps one, a view into its flat gradient buffer), the lookup hands autograd
// a sparse gradient instead, which autograd adds in place into that .grad, row
// by row. Otherwise (no .grad yet) the gradient is dense, as in PyTorch, so
// .grad is never left sparse. Both give the same values.
class BertEmbeddings : public torch::nn::Module {
 public:
  explicit BertEmbeddings(const BertConfig& config);
  // input_ids, token_type_ids: [B, L] int64 -> [B, L, D] (positions 0..L-1)
  at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& token_type_ids);
  // Packed tokens: input_ids, token_type_ids, position_ids [T] int64 -> [T, D]
  at::Tensor forward_packed(const at::Tensor& input_ids, const at::Tensor& token_type_ids,
                            const at::Tensor& position_ids);

  torch::nn::Embedding word_embeddings{nullptr}, position_embeddings{nullptr}, token_type_embeddings{nullptr};
  torch::nn::LayerNorm layer_norm{nullptr};

 private:
  // (words + types + positions) -> LayerNorm -> dropout; positions broadcast.
  at::Tensor combine(const at::Tensor& input_ids, const at::Tensor& token_type_ids, const at::Tensor& position_ids);
  int64_t pad_token_id_;
  double dropout_p_;
};

// Where the tokens of a packed batch sit in the padded layout that attention
// uses; built once per forward and shared by every layer.
struct PackedLayout {
  int64_t num_sequences = 0;  // B
  int64_t max_seqlen = 0;     // Lmax
  at::Tensor padded_rows;     // [T] int64: token t's row in the padded [B * Lmax] layout
  at::Tensor first_tokens;    // [B] int64: each sequence's first token ([CLS]) in the packed order
  at::Tensor additive_mask;   // [B, 1, 1, Lmax]: 0 for real tokens, finfo.min for padding

  // From cu_seqlens [B+1] (any device; read on the host). Throws Error for
  // cu_seqlens that do not start at 0, decrease, hold an empty sequence, or a
  // sequence longer than max_seqlen. Tensors are made on `device`, the mask in `dtype`.
  static PackedLayout from_cu_seqlens(const at::Tensor& cu_seqlens, int64_t max_seqlen, at::ScalarType dtype,
                                      const at::Device& device);
};

// One post-LayerNorm transformer encoder layer with HF's parameter names:
// attention.self.{query,key,value}, attention.output.{dense,LayerNorm},
// intermediate.dense, output.{dense,LayerNorm}.
class BertLayer : public torch::nn::Module {
 public:
  explicit BertLayer(const BertConfig& config);
  // hidden [B, L, D], additive_mask [B, 1, 1, L] (0 keep, finfo.min masked) -> [B, L, D]
  at::Tensor forward(const at::Tensor& hidden, const at::Tensor& additive_mask);
  // hidden [T, D] packed tokens -> [T, D]
  at::Tensor forward_packed(const at::Tensor& hidden, const PackedLayout& layout);

  torch::nn::Linear query{nullptr}, key{nullptr}, value{nullptr};
  torch::nn::Linear attention_output_dense{nullptr};
  torch::nn::LayerNorm attention_output_layer_norm{nullptr};
  torch::nn::Linear intermediate_dense{nullptr};
  torch::nn::Linear output_dense{nullptr};
  torch::nn::LayerNorm output_layer_norm{nullptr};

 private:
  // [..., D] -> [..., 3D]: q, k, v from one matmul (the weights concatenated
  // per call: parameters stay separate, under HF's names and shapes).
  at::Tensor project_qkv(const at::Tensor& hidden);
  // qkv [B, L, 3D] -> context [B, L, H, Dh] (a strided view, not contiguous).
  at::Tensor attend(const at::Tensor& qkv, const at::Tensor& additive_mask);
  // Attention output, residual, LayerNorm, feed-forward, residual, LayerNorm;
  // token-wise: [..., D] -> [..., D].
  at::Tensor finish(const at::Tensor& context, const at::Tensor& hidden);

  int64_t num_heads_;
  std::string activation_;
  double hidden_dropout_p_, attention_dropout_p_;
};

// tanh(dense(hidden[:, 0])) -- the [CLS] pooler. Parameters: dense.{weight,bias}.
class BertPooler : public torch::nn::Module {
 public:
  explicit BertPooler(const BertConfig& config);
  // hidden [B, L, D] -> [B, D]
  at::Tensor forward(const at::Tensor& hidden);
  // The first tokens' hidden states [B, D] -> [B, D]
  at::Tensor forward_first_tokens(const at::Tensor& first_tokens);
  torch::nn::Linear dense{nullptr};
};

// The forward units (UnitModel), in order: 0 the embeddings,
// 1..num_hidden_layers the encoder layers, num_hidden_layers + 1 the head
// (pooler + classifier).
class BertForSequenceClassification : public torch::nn::Module, public UnitModel {
 public:
  // Builds the module tree with LibTorch's default init; call init_weights()
  // (or load weights) before use. Validates `config`, and throws Error before
  // allocating when its parameters do not fit in the available host memory
  // (core/memory.h), naming the sizes.
  explicit BertForSequenceClassification(const BertConfig& config);

  const BertConfig& config() const { return config_; }

  // input_ids [B, L] int64; token_type_ids [B, L] int64 (undefined = all 0);
  // attention_mask [B, L] (1 keep, 0 padding; any dtype; undefined = all 1).
  // Returns logits [B, C] in the parameters' dtype. Dropout is active only in
  // train() mode. Throws shardtrain::Error if L > max_position_embeddings.
  at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& token_type_ids = {},
                     const at::Tensor& attention_mask = {});
  // The same model on a packed batch (see the top of this file): input_ids
  // [T] int64; token_type_ids [T] (undefined = all 0); position_ids [T]
  // (undefined = 0..n_b-1 within each sequence); cu_seqlens [B+1] int64,
  // sequence b = tokens [cu_seqlens[b], cu_seqlens[b+1]); max_seqlen = the
  // longest sequence. Returns logits [B, C], equal to forward() on the padded
  // batch. The unit hooks run around the same units, with [T, D] outputs for
  // the embeddings and the layers. Throws shardtrain::Error for inconsistent
  // shapes or cu_seqlens, or max_seqlen > max_position_embeddings.
  at::Tensor forward_packed(const at::Tensor& input_ids, const at::Tensor& token_type_ids,
                            const at::Tensor& position_ids, const at::Tensor& cu_seqlens, int64_t max_seqlen);
  // The logits of a collated batch: forward_packed() on pack_batch(batch),
  // which holds only the real tokens (moved to the batch's device: a small
  // host round trip on a GPU), or with set_unpadded(false) (model.unpadded)
  // forward() on its padded tensors. Both give the same logits to fp32
  // rounding; in training the dropout masks differ (drawn per token kept).
  at::Tensor forward_batch(const Batch& batch);
  void set_unpadded(bool on) { unpadded_ = on; }
  bool unpadded() const { return unpadded_; }
  // HF's gradient_checkpointing: in training with autograd on, each encoder
  // layer keeps only its input and recomputes its forward in backward
  // (model/activation_checkpoint.h). Gradients equal the plain run's.
  void set_gradient_checkpointing(bool on) { gradient_checkpointing_ = on; }
  bool gradient_checkpointing() const { return gradient_checkpointing_; }
  // The mean loss as HF computes it for config().problem_type:
  //   regression (num_labels == 1): MSE(logits.squeeze(), labels.squeeze()), labels float [B];
  //   single-label: cross-entropy, labels int64 [B] (-100 ignored);
  //   multi-label: BCE-with-logits, labels float [B, C].
  at::Tensor loss(const at::Tensor& logits, const at::Tensor& labels) const;

  // HF _init_weights on every parameter, reproducibly from `seed` (independent
  // of the global torch seed): Linear/Embedding weights ~ N(0, initializer_range),
  // biases 0, LayerNorm weight 1 / bias 0, the word-embedding padding row 0.
  void init_weights(uint64_t seed);
  // The same init, only for the parameters whose HF names are in `names`.
  void init_weights(uint64_t seed, const std::vector<std::string>& names);

  // The pieces, in forward order, for strategies that work layer by layer.
  std::shared_ptr<BertEmbeddings> embeddings() const { return embeddings_; }
  const std::vector<std::shared_ptr<BertLayer>>& layers() const { return layers_; }
  std::shared_ptr<BertPooler> pooler() const { return pooler_; }
  torch::nn::Linear classifier() const { return classifier_; }
  // HF name prefixes of the pieces: "bert.embeddings.", "bert.encoder.layer.<i>.",
  // "bert.pooler.", "classifier.".
  static std::string layer_prefix(int64_t i);
  // UnitModel: num_hidden_layers + 2 units; parameters under HF names, in HF order.
  int64_t num_units() const override { return static_cast<int64_t>(layers_.size()) + 2; }
  int64_t unit_of(const std::string& name) const override;
  void set_unit_hooks(UnitHooks* hooks) override { hooks_ = hooks; }
  std::vector<std::pair<std::string, at::Tensor>> state_dict() const override;

 private:
  // The head unit: pooler on the first tokens [B, D], dropout, classifier -> [B, C].
  at::Tensor head(const at::Tensor& first_tokens);
  void before(int64_t unit);
  at::Tensor after(int64_t unit, at::Tensor output);
  // Encoder layer i on `hidden`, checkpointed when gradient_checkpointing is on.
  at::Tensor run_layer(size_t i, const at::Tensor& hidden, const std::function<at::Tensor(const at::Tensor&)>& forward);

  BertConfig config_;
  std::shared_ptr<BertEmbeddings> embeddings_;
  std::vector<std::shared_ptr<BertLayer>> layers_;
  std::shared_ptr<BertPooler> pooler_;
  torch::nn::Linear classifier_{nullptr};
  UnitHooks* hooks_ = nullptr;
  bool gradient_checkpointing_ = false;
  bool unpadded_ = true;
};

// Applies HF activation `name` (see BertConfig::hidden_act) to x.
at::Tensor apply_activation(const std::string& name, const at::Tensor& x);

}  // namespace shardtrain
