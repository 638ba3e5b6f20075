// Each family's parameters under transformers' names, in the order its
// modules are created there (docs/DESIGN.md, "Model families"). Shapes
// legend: V vocabulary, P positions, T token types, E embedding width, D
// hidden, I intermediate, C labels.
#include "shardtrain/model/parameter_plan.h"

#include <cmath>

namespace shardtrain {
namespace {

// Appends the specs of one family's model in forward order.
class PlanBuilder {
 public:
  explicit PlanBuilder(const EncoderConfig& c) : c_(c) {}

  void set_unit(int64_t unit) { unit_ = unit; }

  void add(const std::string& name, std::vector<int64_t> shape, Slot slot, InitKind init, double std = 0.0) {
    ParameterSpec p;
    p.name = name;
    p.shape = std::move(shape);
    p.unit = unit_;
    p.slot = slot;
    p.init = init;
    p.init_std = std;
    if (init == InitKind::kTruncatedNormal) p.init_cutoff = c_.initializer_cutoff_factor;
    p.trainable = init != InitKind::kSinusoidal;  // HF freezes them (requires_grad = False)
    plan_.push_back(std::move(p));
  }
  // A Linear [out, in] with an optional bias; `slot` is the weight's, the bias
  // the next one.
  void linear(const std::string& name, int64_t out, int64_t in, Slot slot, bool bias = true) {
    add(name + ".weight", {out, in}, slot, weight_init_, weight_std_);
    if (bias) add(name + ".bias", {out}, next(slot), InitKind::kZeros);
  }
  void norm(const std::string& name, int64_t width, Slot slot, bool bias = true) {
    add(name + ".weight", {width}, slot, InitKind::kOnes);
    if (bias) add(name + ".bias", {width}, next(slot), InitKind::kZeros);
  }
  void embedding(const std::string& name, int64_t rows, int64_t width, Slot slot, int64_t padding_row = -1,
                 bool zero_padding_row = true) {
    add(name, {rows, width}, slot, weight_init_, weight_std_);
    plan_.back().padding_row = padding_row;
    plan_.back().zero_padding_row = zero_padding_row;
  }
  // How the Linear / Embedding weights that follow are initialised.
  void weights(InitKind init, double std) {
    weight_init_ = init;
    weight_std_ = std;
  }
  std::vector<ParameterSpec> take() { return std::move(plan_); }

 private:
  static Slot next(Slot s) { return static_cast<Slot>(static_cast<int>(s) + 1); }

  const EncoderConfig& c_;
  std::vector<ParameterSpec> plan_;
  int64_t unit_ = 0;
  InitKind weight_init_ = InitKind::kNormal;
  double weight_std_ = 0.02;
};

// What follows the self-attention's projections in modeling_bert.py's layer
// (and DeBERTa's): the attention output, the MLP, their LayerNorms.
void bert_layer_after_attention(PlanBuilder& b, const std::string& layer, int64_t D, int64_t I) {
  b.linear(layer + "attention.output.dense", D, D, Slot::kAttentionOutWeight);
  b.norm(layer + "attention.output.LayerNorm", D, Slot::kAttentionNormWeight);
  b.linear(layer + "intermediate.dense", I, D, Slot::kMlpInWeight);
  b.linear(layer + "output.dense", D, I, Slot::kMlpOutWeight);
  b.norm(layer + "output.LayerNorm", D, Slot::kMlpNormWeight);
}

// BERT, RoBERTa and ELECTRA share the embeddings and the post-norm encoder
// layer of modeling_bert.py (RoBERTa and ELECTRA copy them), under their prefix.
void bert_style(const EncoderConfig& c, PlanBuilder& b) {
  const std::string base = c.base_prefix();
  const int64_t V = c.vocab_size, P = c.max_position_embeddings, T = c.type_vocab_size, E = c.embedding_width();
  const int64_t D = c.hidden_size, I = c.intermediate_size;
  const bool roberta = c.family == ModelFamily::kRoberta;
  b.weights(InitKind::kNormal, c.initializer_range);
  b.set_unit(0);
  b.embedding(base + "embeddings.word_embeddings.weight", V, E, Slot::kWordEmbeddings, c.pad_token_id);
  // RoBERTa's position embedding has padding_idx = pad_token_id as well.
  b.embedding(base + "embeddings.position_embeddings.weight", P, E, Slot::kPositionEmbeddings,
              roberta ? c.pad_token_id : -1);
  b.embedding(base + "embeddings.token_type_embeddings.weight", T, E, Slot::kTokenTypeEmbeddings);
  b.norm(base + "embeddings.LayerNorm", E, Slot::kEmbeddingNormWeight);
  if (c.family == ModelFamily::kElectra && E != D)
    b.linear(base + "embeddings_project", D, E, Slot::kEmbeddingProjectWeight);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    b.set_unit(i + 1);
    const std::string layer = base + "encoder.layer." + std::to_string(i) + ".";
    b.linear(layer + "attention.self.query", D, D, Slot::kQueryWeight);
    b.linear(layer + "attention.self.key", D, D, Slot::kKeyWeight);
    b.linear(layer + "attention.self.value", D, D, Slot::kValueWeight);
    bert_layer_after_attention(b, layer, D, I);
  }
  b.set_unit(c.head_unit());
  const int64_t C = c.head_outputs();
  switch (c.task) {
    case Task::kSequenceClassification:
      if (c.family == ModelFamily::kBert) {
        b.linear("bert.pooler.dense", D, D, Slot::kHeadDenseWeight);
        b.linear("classifier", C, D, Slot::kClassifierWeight);
      } else {  // RobertaClassificationHead / ElectraClassificationHead
        b.linear("classifier.dense", D, D, Slot::kHeadDenseWeight);
        b.linear("classifier.out_proj", C, D, Slot::kClassifierWeight);
      }
      break;
    case Task::kTokenClassification:  // no pooler: dropout, classifier on every token
      b.linear("classifier", C, D, Slot::kClassifierWeight);
      break;
    case Task::kQuestionAnswering:  // qa_outputs on every token: start and end logits
      b.linear("qa_outputs", C, D, Slot::kClassifierWeight);
      break;
    case Task::kMultipleChoice:  // BERT and RoBERTa: the pooler; ELECTRA: SequenceSummary's projection
      b.linear(c.family == ModelFamily::kElectra ? "sequence_summary.summary" : base + "pooler.dense", D, D,
               Slot::kHeadDenseWeight);
      b.linear("classifier", C, D, Slot::kClassifierWeight);
      break;
  }
}

void distilbert(const EncoderConfig& c, PlanBuilder& b) {
  const int64_t D = c.hidden_size, I = c.intermediate_size;
  b.weights(InitKind::kNormal, c.initializer_range);
  b.set_unit(0);
  b.embedding("distilbert.embeddings.word_embeddings.weight", c.vocab_size, D, Slot::kWordEmbeddings,
              c.pad_token_id);
  if (c.sinusoidal_pos_embds) {
    b.add("distilbert.embeddings.position_embeddings.weight", {c.max_position_embeddings, D},
          Slot::kPositionEmbeddings, InitKind::kSinusoidal);
  } else {
    b.embedding("distilbert.embeddings.position_embeddings.weight", c.max_position_embeddings, D,
                Slot::kPositionEmbeddings);
  }
  b.norm("distilbert.embeddings.LayerNorm", D, Slot::kEmbeddingNormWeight);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    b.set_unit(i + 1);
    const std::string layer = "distilbert.transformer.layer." + std::to_string(i) + ".";
    b.linear(layer + "attention.q_lin", D, D, Slot::kQueryWeight);
    b.linear(layer + "attention.k_lin", D, D, Slot::kKeyWeight);
    b.linear(layer + "attention.v_lin", D, D, Slot::kValueWeight);
    b.linear(layer + "attention.out_lin", D, D, Slot::kAttentionOutWeight);
    b.norm(layer + "sa_layer_norm", D, Slot::kAttentionNormWeight);
    b.linear(layer + "ffn.lin1", I, D, Slot::kMlpInWeight);
    b.linear(layer + "ffn.lin2", D, I, Slot::kMlpOutWeight);
    b.norm(layer + "output_layer_norm", D, Slot::kMlpNormWeight);
  }
  b.set_unit(c.head_unit());
  // Token classification: dropout and classifier on every token; the others:
  // pre_classifier, ReLU, dropout, classifier on the first token.
  // Question answering: dropout (qa_dropout) and qa_outputs on every token.
  if (c.task == Task::kQuestionAnswering) {
    b.linear("qa_outputs", c.head_outputs(), D, Slot::kClassifierWeight);
    return;
  }
  if (c.task != Task::kTokenClassification) b.linear("pre_classifier", D, D, Slot::kHeadDenseWeight);
  b.linear("classifier", c.head_outputs(), D, Slot::kClassifierWeight);
}

// ModernBertPreTrainedModel._init_weights: truncated normal with std
// "in" / "embedding" = initializer_range, "out" = initializer_range /
// sqrt(2 num_layers) (the residual projections and the head's dense),
// "final_out" = hidden_size^-0.5 (the classifier); the padding row is not zeroed.
void modernbert(const EncoderConfig& c, PlanBuilder& b) {
  const int64_t D = c.hidden_size, I = c.intermediate_size;
  const double in_std = c.initializer_range;
  const double out_std = c.initializer_range / std::sqrt(2.0 * static_cast<double>(c.num_hidden_layers));
  b.set_unit(0);
  b.weights(InitKind::kTruncatedNormal, in_std);
  b.embedding("model.embeddings.tok_embeddings.weight", c.vocab_size, D, Slot::kWordEmbeddings, c.pad_token_id,
              /*zero_padding_row=*/false);
  b.norm("model.embeddings.norm", D, Slot::kEmbeddingNormWeight, c.norm_bias);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    b.set_unit(i + 1);
    const std::string layer = "model.layers." + std::to_string(i) + ".";
    if (i > 0) b.norm(layer + "attn_norm", D, Slot::kAttentionNormWeight, c.norm_bias);  // layer 0: Identity
    b.weights(InitKind::kTruncatedNormal, in_std);
    b.linear(layer + "attn.Wqkv", 3 * D, D, Slot::kQkvWeight, c.attention_bias);
    b.weights(InitKind::kTruncatedNormal, out_std);
    b.linear(layer + "attn.Wo", D, D, Slot::kAttentionOutWeight, c.attention_bias);
    b.norm(layer + "mlp_norm", D, Slot::kMlpNormWeight, c.norm_bias);
    b.weights(InitKind::kTruncatedNormal, in_std);
    b.linear(layer + "mlp.Wi", 2 * I, D, Slot::kMlpInWeight, c.mlp_bias);
    b.weights(InitKind::kTruncatedNormal, out_std);
    b.linear(layer + "mlp.Wo", D, I, Slot::kMlpOutWeight, c.mlp_bias);
  }
  b.set_unit(c.head_unit());
  b.norm("model.final_norm", D, Slot::kFinalNormWeight, c.norm_bias);
  b.weights(InitKind::kTruncatedNormal, out_std);
  b.linear("head.dense", D, D, Slot::kHeadDenseWeight, c.classifier_bias);
  b.norm("head.norm", D, Slot::kHeadNormWeight, c.norm_bias);
  b.weights(InitKind::kTruncatedNormal, 1.0 / std::sqrt(static_cast<double>(D)));
  // Every task: the same head (per token for token classification), then the
  // classifier, always with a bias in transformers.
  b.linear("classifier", c.head_outputs(), D, Slot::kClassifierWeight);
}

// DeBERTa-v2 (modeling_deberta_v2.py). One deviation from HF's order: the
// encoder's rel_embeddings and LayerNorm come right after the embeddings, in
// their own unit, where they run (HF lists them after the last layer), so the
// flat layout's gradient buckets fill in backward order (docs/DESIGN.md,
// "DeBERTa-v2"). Names are HF's; a folder's order does not matter to loading.
void deberta_v2(const EncoderConfig& c, PlanBuilder& b) {
  const int64_t D = c.hidden_size, I = c.intermediate_size;
  const bool relative = c.relative_attention;
  b.weights(InitKind::kNormal, c.initializer_range);
  b.set_unit(0);
  b.embedding("deberta.embeddings.word_embeddings.weight", c.vocab_size, D, Slot::kWordEmbeddings, c.pad_token_id);
  if (c.position_biased_input)
    b.embedding("deberta.embeddings.position_embeddings.weight", c.max_position_embeddings, D,
                Slot::kPositionEmbeddings);
  if (c.has_token_types())
    b.embedding("deberta.embeddings.token_type_embeddings.weight", c.type_vocab_size, D, Slot::kTokenTypeEmbeddings);
  b.norm("deberta.embeddings.LayerNorm", D, Slot::kEmbeddingNormWeight);
  if (relative) {
    b.set_unit(1);
    b.embedding("deberta.encoder.rel_embeddings.weight", 2 * c.relative_span(), D, Slot::kRelativeEmbeddings);
    if (c.norm_relative_embeddings()) b.norm("deberta.encoder.LayerNorm", D, Slot::kRelativeNormWeight);
  }
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    b.set_unit(c.layer_unit(i));
    const std::string layer = "deberta.encoder.layer." + std::to_string(i) + ".";
    b.linear(layer + "attention.self.query_proj", D, D, Slot::kQueryWeight);
    b.linear(layer + "attention.self.key_proj", D, D, Slot::kKeyWeight);
    b.linear(layer + "attention.self.value_proj", D, D, Slot::kValueWeight);
    if (relative && !c.share_att_key) {
      if (c.has_position_term("c2p")) b.linear(layer + "attention.self.pos_key_proj", D, D, Slot::kPositionKeyWeight);
      if (c.has_position_term("p2c"))
        b.linear(layer + "attention.self.pos_query_proj", D, D, Slot::kPositionQueryWeight);
    }
    bert_layer_after_attention(b, layer, D, I);
  }
  b.set_unit(c.head_unit());
  if (c.task == Task::kQuestionAnswering) {  // DebertaV2ForQuestionAnswering: qa_outputs on every token
    b.linear("qa_outputs", c.head_outputs(), D, Slot::kClassifierWeight);
    return;
  }
  // Sequence classification and multiple choice: the ContextPooler; token
  // classification: dropout and the classifier on every token.
  if (c.task != Task::kTokenClassification) b.linear("pooler.dense", D, D, Slot::kHeadDenseWeight);
  b.linear("classifier", c.head_outputs(), D, Slot::kClassifierWeight);
}

}  // namespace

int64_t ParameterSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<ParameterSpec> parameter_plan(const EncoderConfig& config) {
  PlanBuilder b(config);
  switch (config.family) {
    case ModelFamily::kDistilBert: distilbert(config, b); break;
    case ModelFamily::kModernBert: modernbert(config, b); break;
    case ModelFamily::kDebertaV2: deberta_v2(config, b); break;
    default: bert_style(config, b); break;
  }
  return b.take();
}

int64_t count_trainable(const std::vector<ParameterSpec>& plan) {
  int64_t n = 0;
  for (const auto& p : plan)
    if (p.trainable) n += p.numel();
  return n;
}

int64_t EncoderConfig::num_parameters() const { return count_trainable(parameter_plan(*this)); }

}  // namespace shardtrain
