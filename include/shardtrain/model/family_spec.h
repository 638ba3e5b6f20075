// What makes a model family (docs/DESIGN.md, "Model families"): one
// FamilySpec per family, defined in src/model/families/<family>.cpp, keyed
// by ModelFamily (model/family_list.h). Torch-free: the config layer and the
// memory estimate read it without LibTorch (as will the LoRA and ONNX work,
// issues 44 and 43: the LoRA targets are here for it).
//
// A family owns
//   - its config.json: the transformers config class's defaults, the keys it
//     reads (under its own names) and writes back, its own checks;
//   - its parameter plan: every tensor under HF's name, shape, init, unit;
//   - its recipes: what the shared model code (the embeddings, the one
//     encoder layer, the heads; src/model/) computes for it. The memory
//     estimate reads the same recipes, so a rule (a dropout, a norm kept in
//     fp32) is stated once, in the family's file;
//   - what other tools need of it: the bare model's modules (loading a
//     checkpoint without the task head), PEFT's default LoRA target modules.
//
//   const FamilySpec& spec = family_spec(config.family);
//   LayerSpec layer = spec.layer(config, 0);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "shardtrain/model/encoder_config.h"
#include "shardtrain/model/parameter_plan.h"

namespace shardtrain {

namespace detail {
class PlanBuilder;  // src/model/families/plan_builder.h
}

// A normalisation over the hidden size: LayerNorm (weight, optional bias), or
// RMSNorm (Llama-style, EuroBERT: x / sqrt(mean(x^2) + eps) * weight, in fp32).
enum class NormKind { kLayerNorm, kRmsNorm };

// How one encoder layer computes (model/encoder.h runs it).
struct LayerSpec {
  int64_t num_heads = 12;
  // Grouped-query attention (EuroBERT's num_key_value_heads): key and value
  // have this many heads, each shared by num_heads / num_kv_heads query heads
  // (transformers' repeat_kv); 0 = num_heads.
  int64_t num_kv_heads = 0;
  std::string activation = "gelu";
  double norm_eps = 1e-12;
  NormKind norm = NormKind::kLayerNorm;  // the layer's norms
  bool pre_norm = false;       // ModernBERT, EuroBERT: x + f(norm(x)); else norm(x + f(x))
  // ModernBERT: Wi -> [input, gate], act(input) * gate. EuroBERT: act(gate_proj(x)) * up_proj(x),
  // the two Linears at kMlpGateWeight and kMlpInWeight.
  bool gated_mlp = false;
  double attention_probs_dropout = 0.0;
  double attention_out_dropout = 0.0;  // after the attention output projection (0 for DistilBERT)
  double mlp_inner_dropout = 0.0;      // ModernBERT: before Wo
  double mlp_out_dropout = 0.0;        // after the MLP's output projection
  double rope_theta = 0.0;             // > 0: rotary positions (ModernBERT, EuroBERT, GTE)
  // > 1: rotary positions divided by it (HF's "linear" RoPE scaling; GTE's NTK
  // scaling is this with a larger theta, as transformers' GteConfig converts it).
  double rope_linear_factor = 1.0;
  // GTE's fused up_gate_proj: [up, gate], up * act(gate) (ModernBERT's Wi
  // activates its first half).
  bool gate_second_half = false;
  int64_t half_window = -1;            // >= 0: keys within this distance only (ModernBERT local layers)
  // Attention scores (B x H x L x Lk elements) above which the CPU kernel
  // computes in blocks of query rows and keeps no score matrix for backward:
  // memory O(L) instead of O(L^2), one matmul more in backward
  // (TaskModel::set_attention_block_threshold). 2^24: 64 MiB of
  // fp32 scores, which a 12-head layer reaches at one sequence of 1183 tokens.
  // Measured (benchmarks/README.md, sliding window): blocks cost nothing at
  // 128 and 512 tokens and were 3x faster than whole matrices at 2048, whose
  // scores no longer stay in cache.
  int64_t attention_block_threshold = kAttentionBlockScores;

  // DeBERTa-v2's disentangled attention (model/disentangled_attention.h).
  bool disentangled = false;
  bool content_to_position = false, position_to_content = false;  // pos_att_type's "c2p", "p2c"
  bool share_att_key = false;       // position terms through the layer's own query / key projections
  double attention_scale = 0.0;     // sqrt(Dh x (1 + number of terms)), for disentangled layers
  double position_dropout = 0.0;    // pos_dropout on the relative embeddings
  // CPU: the fused kernel (true) or the ATen ops other devices run (tests compare them).
  bool cpu_attention_kernel = true;

  // The family's layer `layer` (family_spec(config.family).layer).
  static LayerSpec of(const EncoderConfig& config, int64_t layer);
  // What every family's layer starts from: the heads, hidden_act,
  // layer_norm_eps and the attention probabilities' dropout.
  static LayerSpec common(const EncoderConfig& config);
};

// The embeddings unit: word embeddings, then token types and absolute
// positions (when the family has them, in its order), LayerNorm, dropout,
// and a projection to hidden_size (ELECTRA).
struct EmbeddingRecipe {
  bool absolute_positions = true;      // a position embedding is added (not ModernBERT's rotary ones)
  bool positions_before_types = false; // DeBERTa: words + positions + types; BERT: words + types + positions
  // RoBERTa: positions count from pad_token_id + 1 (create_position_ids_from_input_ids)
  // and the position embedding's padding row is pad_token_id.
  bool positions_after_padding = false;
  bool norm = true;                    // a LayerNorm (EuroBERT's embeddings have none)
  double dropout = 0.0;                // after the LayerNorm
  bool projection = false;             // ELECTRA: embeddings_project, embedding_size -> hidden_size
};

// The head of a sequence-level task (sequence classification, multiple
// choice) on the pooled first token (or the mean):
//   classifier(dropout_out(norm?(activation(dense(dropout_in(pooled))))))
//
// EuroBERT's classifier_pooling "late" runs the head on every token and
// averages the logits of the real tokens instead.
struct PooledHeadRecipe {
  bool final_norm = false;    // ModernBERT, EuroBERT: the model's final norm before pooling
  NormKind final_norm_kind = NormKind::kLayerNorm;
  bool mean_pooling = false;  // classifier_pooling "mean": the mean of the real tokens
  bool late_pooling = false;  // EuroBERT's "late": the mean of the real tokens' logits
  double dropout_in = 0.0;
  std::string activation = "tanh";  // an ACT2FN name (model/task_model.h, apply_activation)
  bool norm = false;                // ModernBERT: head.norm after the activation
  double dropout_out = 0.0;
};

// The head of a task on every token (token classification, question
// answering): classifier(dropout(prediction_head?(hidden))).
struct TokenHeadRecipe {
  // The model's final norm first (ModernBERT's final_norm, EuroBERT's model.norm).
  bool final_norm = false;
  NormKind final_norm_kind = NormKind::kLayerNorm;
  // ModernBERT: head.dense, `activation`, head.norm (after the final norm).
  bool prediction_head = false;
  std::string activation = "gelu";  // the prediction head's (an ACT2FN name)
  double dropout = 0.0;
};

// How a family's config.json spells a key that EncoderConfig holds under
// BERT's name (DistilBERT: hidden_size is "dim").
struct KeyName {
  const char* field;
  const char* key;
};

// A config.json model_type that reads as the family, with what differs by it.
struct ModelType {
  const char* name;          // "xlm-roberta"
  const char* class_prefix;  // HF's class names: "XLMRoberta" + "ForSequenceClassification"
  // PEFT's default LoRA target modules for this model_type
  // (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING); empty: PEFT has
  // none, and the user must name them.
  std::vector<std::string> lora_target_modules;
  // The encoder's prefix when it differs by model_type (GTE: "new." for the
  // hub layout, "gte." for transformers'); nullptr: the family's base_prefix.
  const char* base_prefix = nullptr;
};

// Whether the family has token-type embeddings.
enum class TokenTypes {
  kNone,      // type_vocab_size must be 0 (DistilBERT, ModernBERT)
  kOptional,  // 0 means none (DeBERTa)
  kRequired,  // at least 1 (BERT, RoBERTa, ELECTRA)
};

struct FamilySpec {
  ModelFamily family;
  const char* name;  // "bert", "roberta", ... (family_name)
  // config.json's model_type values; the first is the family's own.
  std::vector<ModelType> model_types;
  // The prefix of the encoder's parameters in HF's state dict ("bert."; a
  // model_type may have its own, ModelType::base_prefix).
  const char* base_prefix;
  // The top-level modules of the bare base model (BertModel, ...): a
  // checkpoint of the bare model names them without base_prefix.
  std::vector<std::string> base_modules;
  // Checkpoint tensors that transformers ignores when the model lacks them
  // (_keys_to_ignore_on_load_unexpected): a name holding one of these.
  std::vector<std::string> ignored_checkpoint_keys;

  // --- config.json ---
  TokenTypes token_types;
  // ELECTRA: the embeddings are embedding_size wide (embedding_width()).
  bool separate_embedding_width;
  // ModernBERT: layers attend globally every global_attn_every_n_layers,
  // locally (in the window) otherwise (is_global_layer).
  bool local_attention_layers;
  // The keys EncoderConfig holds under another name in this family.
  std::vector<KeyName> key_names;
  // The config.json keys this family reads beyond the shared ones
  // (vocab_size, max_position_embeddings, ...); the rest go to extra_json.
  std::vector<std::string> keys;
  // The transformers config class's defaults (config.model_type is set).
  void (*defaults)(EncoderConfig& config);
  // Reads the family's keys (missing keys keep the defaults); refuses parts
  // of the architecture that are not implemented, naming the key.
  void (*read)(const nlohmann::json& json, EncoderConfig& config, const std::string& source);
  // Writes them back under the family's names.
  void (*write)(const EncoderConfig& config, nlohmann::json& json);
  // The family's own checks of the values read (EncoderConfig::validate calls
  // it after the shared shape and dropout checks, before the label checks);
  // keys it refuses outright are refused in `read`.
  void (*validate)(const EncoderConfig& config, const std::string& source);

  // --- the model ---
  // Adds the family's parameters, in the order transformers creates them
  // (parameter_plan).
  void (*plan)(const EncoderConfig& config, detail::PlanBuilder& plan);
  EmbeddingRecipe (*embeddings)(const EncoderConfig& config);
  LayerSpec (*layer)(const EncoderConfig& config, int64_t layer);
  PooledHeadRecipe (*pooled_head)(const EncoderConfig& config);
  TokenHeadRecipe (*token_head)(const EncoderConfig& config);

  // config.json's spelling of EncoderConfig's `field` in this family.
  const char* key(const char* field) const;
  // The model_type entry of `config` (its first when none matches).
  const ModelType& model_type(const std::string& name) const;
};

const FamilySpec& family_spec(ModelFamily family);
// Every family, in ModelFamily's order.
const std::vector<const FamilySpec*>& all_families();
// The family that reads config.json's model_type `name`, or nullptr.
const FamilySpec* family_of_model_type(const std::string& name);
// Every model_type a family reads, in the table's order: "bert, roberta, ...".
std::string model_type_names();

}  // namespace shardtrain
