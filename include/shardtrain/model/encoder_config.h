// The configuration of an encoder model, as Hugging Face's config.json
// describes it, for every model family shardtrain trains (docs/DESIGN.md,
// "Model families"; each family's file in src/model/families/ and its
// FamilySpec, model/family_spec.h):
//
//   model_type                          family       HF class
//   bert                                kBert        BertForSequenceClassification
//   roberta, xlm-roberta, camembert     kRoberta     RobertaForSequenceClassification (and the XLM-R / CamemBERT copies)
//   distilbert                          kDistilBert  DistilBertForSequenceClassification
//   electra                             kElectra     ElectraForSequenceClassification
//   modernbert                          kModernBert  ModernBertForSequenceClassification
//   deberta-v2 (DeBERTa-v2 and v3)      kDebertaV2   DebertaV2ForSequenceClassification
//   new (GTE's hub layout), gte         kGte         NewForSequenceClassification, GteForSequenceClassification
//
//   EncoderConfig config = EncoderConfig::from_file("roberta-base/config.json");
//   config.set_num_labels(3);
//   std::string json = config.to_json();   // what from_pretrained reads back
//
// config.task picks the head (sequence classification, token classification,
// multiple choice, question answering) and the class name written to
// architectures.
//
// One struct holds every family's fields, under BERT's names; each family's
// config.json keys are read into them (DistilBERT's dim / n_layers / n_heads /
// hidden_dim / dropout / attention_dropout / seq_classif_dropout, ModernBERT's
// hidden_activation / norm_eps / ..., DeBERTa's cls_dropout) and written back
// under the family's own names. Fields that a family does not have keep their defaults and are not
// written. Only light standard headers: every layer includes this.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardtrain/core/enum_names.h"  // Task
#include "shardtrain/model/family_list.h"

namespace shardtrain {

// Attention score elements (B x H x L x keys of one layer) above which the
// CPU kernel computes in blocks of query rows and keeps no score matrix for
// backward (docs/DESIGN.md, "Unpadded batches and the CPU kernels"); the
// memory estimate counts no probabilities above it.
inline constexpr int64_t kAttentionBlockScores = int64_t{1} << 24;

// Sliding-window (local) attention over a packed batch runs in blocks of
// banded_attention_block(half_window) queries (the half window, at least 4
// rows), each against the block + 2 half_window keys around it; it is used
// when the longest sequence is longer than those keys, below which attention
// padded per sequence costs less (docs/DESIGN.md, "Model families"). The
// memory estimate follows the same rule.
inline constexpr int64_t banded_attention_block(int64_t half_window) { return half_window > 4 ? half_window : 4; }
inline constexpr bool banded_attention_pays(int64_t max_seqlen, int64_t half_window) {
  return half_window >= 0 && max_seqlen > banded_attention_block(half_window) + 2 * half_window;
}

// One enumerator per row of model/family_list.h, in its order.
enum class ModelFamily {
#define SHARDTRAIN_FAMILY_ENUMERATOR(id, function) id,
  SHARDTRAIN_FAMILIES(SHARDTRAIN_FAMILY_ENUMERATOR)
#undef SHARDTRAIN_FAMILY_ENUMERATOR
};

// "bert", "roberta", "distilbert", "electra", "modernbert", "deberta-v2", "gte".
const char* family_name(ModelFamily family);

struct EncoderConfig {
  ModelFamily family = ModelFamily::kBert;
  // config.json's model_type, kept as written ("xlm-roberta" and "camembert"
  // are the RoBERTa family under their own names).
  std::string model_type = "bert";

  // --- the encoder (bert-base defaults) ---
  int64_t vocab_size = 30522;
  int64_t hidden_size = 768;          // DistilBERT: dim
  int64_t num_hidden_layers = 12;     // DistilBERT: n_layers
  int64_t num_attention_heads = 12;   // DistilBERT: n_heads
  int64_t intermediate_size = 3072;   // DistilBERT: hidden_dim
  // ELECTRA: the embeddings' width; a Linear (electra.embeddings_project)
  // maps it to hidden_size when they differ. Ignored by the other families
  // (embedding_width() is their hidden_size).
  int64_t embedding_size = 128;
  // One of HF's ACT2FN names (apply_activation): gelu (erf), gelu_python,
  // gelu_new, gelu_pytorch_tanh, gelu_accurate, gelu_fast, quick_gelu, gelu_10,
  // relu, relu2, relu6, leaky_relu, silu, swish, mish, tanh, sigmoid, linear,
  // laplace. DistilBERT: activation; ModernBERT: hidden_activation.
  std::string hidden_act = "gelu";
  // After the embeddings and each sublayer's output (BERT); DistilBERT:
  // dropout; ModernBERT: mlp_dropout (inside the MLP).
  double hidden_dropout_prob = 0.1;
  // On the attention probabilities. DistilBERT: attention_dropout; ModernBERT:
  // attention_dropout (also on the attention output).
  double attention_probs_dropout_prob = 0.1;
  // Before the classifier; < 0 is HF's null (use hidden_dropout_prob).
  // DistilBERT: seq_classif_dropout; ModernBERT: classifier_dropout; DeBERTa: cls_dropout.
  double classifier_dropout = -1.0;
  int64_t max_position_embeddings = 512;
  // Token types: 0 for a family without token-type embeddings (DistilBERT,
  // ModernBERT); RoBERTa has 1.
  int64_t type_vocab_size = 2;
  double initializer_range = 0.02;
  double layer_norm_eps = 1e-12;      // ModernBERT: norm_eps; DistilBERT: fixed 1e-12; DeBERTa: 1e-7
  int64_t pad_token_id = 0;
  // Whether the word embedding has a padding row at pad_token_id (nn.Embedding's
  // padding_idx: zero at init, no gradient). False only where config.json's
  // pad_token_id is null and the family then has none (GTE's hub layout:
  // new-impl's NewConfig has no default); written back as null.
  bool word_padding_row = true;
  std::string position_embedding_type = "absolute";  // the only one supported (BERT, RoBERTa, ELECTRA)
  // DistilBERT: fixed sin/cos position embeddings (not trained, as HF freezes them).
  bool sinusoidal_pos_embds = false;

  // --- ModernBERT ---
  int64_t global_attn_every_n_layers = 3;  // layer i is global when i % n == 0
  int64_t local_attention = 128;           // window width: keys within local_attention / 2 on each side
  double global_rope_theta = 160000.0;
  double local_rope_theta = 10000.0;
  double embedding_dropout = 0.0;
  bool attention_bias = false, mlp_bias = false, norm_bias = false, classifier_bias = false;
  std::string classifier_pooling = "cls";  // "cls" or "mean" (over the real tokens)
  std::string classifier_activation = "gelu";
  double initializer_cutoff_factor = 2.0;  // truncated-normal init at +-cutoff x std
  bool tie_word_embeddings = true;         // for the MLM head only; kept and written back

  // --- Llama-style layers (EuroBERT) ---
  // Grouped-query attention: key and value heads, each shared by
  // num_attention_heads / num_key_value_heads query heads; 0 = num_attention_heads.
  int64_t num_key_value_heads = 0;
  double rope_theta = 10000.0;  // RoPE's base, also GTE's (ModernBERT has global_rope_theta and local_rope_theta)

  // --- DeBERTa-v2 / v3 (docs/DESIGN.md, "DeBERTa-v2") ---
  // Disentangled attention: content-to-position ("c2p") and position-to-content
  // ("p2c") terms over relative positions, with the relative embeddings
  // (encoder.rel_embeddings, 2 x relative_span() rows) shared by every layer.
  bool relative_attention = false;
  int64_t max_relative_positions = -1;  // < 1: max_position_embeddings
  int64_t position_buckets = -1;        // > 0: log buckets beyond position_buckets / 2 (v3: 256)
  std::vector<std::string> pos_att_type;  // any of "c2p", "p2c", in config.json's order
  bool share_att_key = false;            // the position terms use the layer's key/query projections
  std::string norm_rel_ebd = "none";     // "layer_norm": rel_embeddings through encoder.LayerNorm
  bool position_biased_input = true;     // absolute position embeddings added to the input (v3: false)
  double pooler_dropout = 0.0;           // ContextPooler: on the first token, before its dense
  std::string pooler_hidden_act = "gelu";  // ContextPooler's activation (an ACT2FN name)

  // --- GTE: the hub layout ("new") and transformers' ("gte"); its base is rope_theta ---
  // "" (none); "ntk" (the hub layout's NTKScalingRotaryEmbedding: base x
  // factor, frequencies / factor^(2 / head size)); "linear" (positions / factor).
  std::string rope_scaling_type;
  double rope_scaling_factor = 1.0;
  bool pack_qkv = true;  // "new": one qkv_proj [3D, D]; false: q_proj, k_proj, v_proj

  // --- the task ---
  // What the head does (each family's file lists its head per task,
  // src/model/families/): read from config.json's architectures ("BertForTokenClassification"
  // -> kTokenClassification; any other class, e.g. BertForMaskedLM, reads as
  // kSequenceClassification and has_task_head false), written back by to_json.
  Task task = Task::kSequenceClassification;
  // Whether config.json's architectures named one of the task classes.
  bool has_task_head = false;
  // DistilBERT's qa_dropout (question answering); ELECTRA's SequenceSummary
  // summary_last_dropout (multiple choice).
  double qa_dropout = 0.1;
  double summary_last_dropout = 0.1;
  int64_t num_labels = 2;
  std::vector<std::string> id2label;  // id2label[i] = name of label i; size num_labels
  // "" (infer as HF does: regression when num_labels == 1, else single- or
  // multi-label by the labels' dtype), "regression", "single_label_classification",
  // "multi_label_classification".
  std::string problem_type;
  // Keys of config.json this struct does not model (e.g. "transformers_version",
  // bos_token_id), as a JSON object text, written back by to_json().
  std::string extra_json = "{}";

  // Parses a HF config.json text; `source` names the file in errors. The family
  // comes from model_type (absent: "bert"). Missing keys take the family's HF
  // defaults; wrong types and invalid values throw shardtrain::Error naming
  // the key. The result is validated.
  static EncoderConfig from_json(const std::string& text, const std::string& source = "config.json");
  static EncoderConfig from_file(const std::string& path);
  // The config as HF writes it for this family (model_type, architectures
  // ["<Family>ForSequenceClassification"], the family's key names,
  // id2label/label2id), pretty-printed.
  std::string to_json() const;
  // Throws shardtrain::Error naming the key for any invalid value
  // (hidden_size % num_attention_heads != 0, non-positive sizes, p outside [0, 1),
  // vocab_size beyond 32-bit token ids, more than kMaxNumLabels labels, more
  // than 2^50 parameters, ...).
  void validate(const std::string& source = "config") const;

  // Whether id2label holds names of its own, not HF's default LABEL_<i>.
  bool has_label_names() const;
  // Sets num_labels and resets id2label to HF's default names "LABEL_<i>".
  // Error when n is outside [1, kMaxNumLabels].
  void set_num_labels(int64_t n);
  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  // The embeddings' width: embedding_size for a family whose embeddings are
  // projected to hidden_size (ELECTRA), else hidden_size.
  int64_t embedding_width() const;
  double effective_classifier_dropout() const {
    return classifier_dropout >= 0 ? classifier_dropout : hidden_dropout_prob;
  }
  // HF's class name for the family and task: "BertForSequenceClassification",
  // "XLMRobertaForTokenClassification", "ModernBertForMultipleChoice", ...
  std::string architecture() const;
  // The logits per sequence (sequence classification: num_labels; multiple
  // choice: 1 per choice) or per token (token classification: num_labels).
  int64_t head_outputs() const;
  // The prefix of the encoder's parameters in HF's state dict: "bert.",
  // "roberta.", "distilbert.", "electra.", "model." (ModernBERT), "deberta.",
  // "new." or "gte." (GTE, by model_type).
  std::string base_prefix() const;
  // Whether the model takes token type ids (type_vocab_size > 0).
  bool has_token_types() const { return type_vocab_size > 0; }
  // The longest sequence the model takes: max_position_embeddings, less
  // RoBERTa's pad_token_id + 1 (its positions start after the padding index:
  // 512 for roberta-base's 514).
  int64_t max_sequence_length() const;

  // DeBERTa: whether attention has the relative position terms; then the
  // relative embeddings and their LayerNorm are a forward unit of their own
  // (docs/DESIGN.md, "DeBERTa-v2"), between the embeddings and layer 0.
  // (Only DeBERTa's config.json sets relative_attention.)
  bool has_relative_unit() const { return relative_attention; }
  // DeBERTa: max_relative_positions, or max_position_embeddings when < 1.
  int64_t relative_positions_limit() const {
    return max_relative_positions > 0 ? max_relative_positions : max_position_embeddings;
  }
  // DeBERTa: att_span, the relative distance the embeddings reach on each side
  // (position_buckets when > 0, else relative_positions_limit()).
  int64_t relative_span() const { return position_buckets > 0 ? position_buckets : relative_positions_limit(); }
  // DeBERTa: whether pos_att_type holds `type` ("c2p" or "p2c").
  bool has_position_term(const std::string& type) const;
  // DeBERTa: whether rel_embeddings go through encoder.LayerNorm (norm_rel_ebd
  // holds "layer_norm" among its "|"-separated names).
  bool norm_relative_embeddings() const;
  // The forward units (model/unit_model.h): 0 the embeddings, then DeBERTa's
  // relative embeddings unit when has_relative_unit(), one per encoder layer,
  // and the head last.
  int64_t layer_unit(int64_t layer) const { return layer + (has_relative_unit() ? 2 : 1); }
  int64_t head_unit() const { return layer_unit(num_hidden_layers); }
  int64_t num_units() const { return head_unit() + 1; }
  // Whether encoder layer i attends globally (else in the window: ModernBERT's
  // local layers).
  bool is_global_layer(int64_t i) const;
  // The trainable parameters of the classifier for this config (108,311,810
  // for bert-base-cased with 2 labels; 124,647,170 for roberta-base).
  int64_t num_parameters() const;
};

// The configuration HF uses for "bert-base-cased" (vocab 28996), with `num_labels`.
EncoderConfig bert_base_cased_config(int64_t num_labels = 2);

}  // namespace shardtrain
