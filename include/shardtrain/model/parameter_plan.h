// The parameters of a model for any family and task, computed from its config
// alone (docs/DESIGN.md, "Model families"): each one's Hugging Face name,
// shape, forward unit, what it is (its slot) and how HF initialises it.
//
//   for (const ParameterSpec& p : parameter_plan(config)) ...   // HF state-dict order
//
// A family's file lists them (FamilySpec::plan, src/model/families/), and
// this is the one list everything else reads. The model allocates exactly
// these tensors (model/task_model.h), a checkpoint's layout is computed from
// them without allocating the model (train/checkpoint_model.h), and memory
// estimates read the shapes and units from them (train/memory_estimate.h).
//
// Units, as the strategies see them (model/unit_model.h): 0 the embeddings
// (with ELECTRA's embeddings_project), 1..num_hidden_layers the encoder
// layers, num_hidden_layers + 1 the head (ModernBERT's final_norm, the
// family's head and the classifier). DeBERTa with relative attention has one
// unit more, 1, for the relative embeddings every layer reads; its layers are
// 2..num_hidden_layers + 1 (EncoderConfig::layer_unit, head_unit).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardtrain/model/encoder_config.h"

namespace shardtrain {

// What a parameter is to the forward code. Every family fills the slots it
// has; a layer's slots repeat per layer (the unit tells which one).
enum class Slot : int {
  // embeddings (unit 0)
  kWordEmbeddings,
  kPositionEmbeddings,
  kTokenTypeEmbeddings,
  kEmbeddingNormWeight,
  kEmbeddingNormBias,
  kEmbeddingProjectWeight,  // ELECTRA: embedding_size -> hidden_size
  kEmbeddingProjectBias,
  // an encoder layer (units 1..N)
  kQueryWeight,
  kQueryBias,
  kKeyWeight,
  kKeyBias,
  kValueWeight,
  kValueBias,
  kQkvWeight,  // ModernBERT: one fused [3D, D]
  kQkvBias,
  kAttentionOutWeight,
  kAttentionOutBias,
  kAttentionNormWeight,  // post-norm: after attention; pre-norm: before it
  kAttentionNormBias,
  kMlpInWeight,  // ModernBERT: [2I, D], input and gate; Llama-style (EuroBERT): up_proj
  kMlpInBias,
  kMlpGateWeight,  // Llama-style (EuroBERT): gate_proj, activated, times up_proj's output
  kMlpGateBias,
  kMlpOutWeight,
  kMlpOutBias,
  kMlpNormWeight,
  kMlpNormBias,
  // DeBERTa-v2: the relative embeddings unit, and each layer's own position
  // projections (share_att_key false)
  kRelativeEmbeddings,
  kRelativeNormWeight,
  kRelativeNormBias,
  kPositionKeyWeight,
  kPositionKeyBias,
  kPositionQueryWeight,
  kPositionQueryBias,
  // the head (unit N + 1)
  kFinalNormWeight,  // ModernBERT
  kFinalNormBias,
  kHeadDenseWeight,  // BERT's pooler, RoBERTa/ELECTRA's classifier.dense, DistilBERT's pre_classifier, ModernBERT's head.dense
  kHeadDenseBias,
  kHeadNormWeight,  // ModernBERT's head.norm
  kHeadNormBias,
  kClassifierWeight,  // classifier / classifier.out_proj
  kClassifierBias,
  kCount
};

// How HF's _init_weights fills a parameter.
enum class InitKind {
  kNormal,           // N(0, std)
  kTruncatedNormal,  // N(0, std) truncated to [-cutoff std, cutoff std] (ModernBERT)
  kZeros,
  kOnes,
  kSinusoidal,  // DistilBERT's fixed position embeddings
  kKaimingUniform,  // torch's Linear default, kaiming_uniform_(a = sqrt(5)): U(-1/sqrt(in), 1/sqrt(in)) (LoRA's A)
};

// A LoRA adapter's parameter (model/lora.h): its slot is the target Linear's weight slot.
enum class LoraPart { kNone, kA, kB };

struct ParameterSpec {
  std::string name;            // HF state-dict key
  std::vector<int64_t> shape;  // [out, in] for a Linear weight
  int64_t unit = 0;
  Slot slot = Slot::kCount;
  InitKind init = InitKind::kNormal;
  double init_std = 0.02;      // kNormal / kTruncatedNormal
  double init_cutoff = 0.0;    // kTruncatedNormal: in units of std
  int64_t padding_row = -1;    // an embedding's padding_idx (gets no gradient), or -1
  bool zero_padding_row = true;  // HF zeroes that row at init (all but ModernBERT)
  LoraPart lora = LoraPart::kNone;  // kA [r, in] / kB [out, r] of the Linear at `slot`
  bool trainable = true;       // false: a fixed tensor (DistilBERT sinusoidal positions), not trained or checkpointed
  int64_t numel() const;
};

// Every parameter of the classifier for `config` (validated), in HF's
// state-dict order, the untrainable ones included.
std::vector<ParameterSpec> parameter_plan(const EncoderConfig& config);

// The trainable parameters' element count (what EncoderConfig::num_parameters() returns).
int64_t count_trainable(const std::vector<ParameterSpec>& plan);

}  // namespace shardtrain
