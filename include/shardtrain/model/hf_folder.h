// Hugging Face model folders in and out.
//
//   HfLoadOptions options;                     // optional: num_labels, dropout overrides, seed
//   HfModel hf = load_hf_folder("bert-base-cased", options);
//   log_info("%s", hf.report.message().c_str());  // HF-style "Some weights ... newly initialized"
//   ... train hf.model ...
//   HfSaveOptions save;
//   save.copy_files = {"bert-base-cased/vocab.txt", "bert-base-cased/tokenizer_config.json"};
//   save_hf_folder(*hf.model, "out/", save);
//
// A folder holds config.json and model.safetensors, or a sharded checkpoint
// (model.safetensors.index.json + the shards it names). A folder with only
// pytorch_model.bin (a Python pickle) is refused: shardtrain never unpickles.
//
// The family comes from config.json's model_type (model/encoder_config.h).
// Names are matched like transformers does for <Family>ForSequenceClassification:
// legacy LayerNorm names "gamma"/"beta" become "weight"/"bias"; a bare base-model
// checkpoint ("embeddings.*", "encoder.*", ...) gets the base prefix ("bert.",
// "roberta.", "distilbert.", "electra.", "model.", "deberta."); the position_ids /
// token_type_ids buffers are dropped; pretraining heads ("cls.predictions.*",
// "lm_head.*", "discriminator_predictions.*", "vocab_projector.*", ModernBERT's
// "decoder.*") and other unknown tensors are reported as unused. A ModernBERT
// masked-LM checkpoint's "head.*" is the classification head's too, as in HF. Parameters absent from the checkpoint (typically the
// classifier) are initialised as HF's _init_weights does and reported. A shape
// mismatch is an error naming the tensor and both shapes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shardtrain/model/encoder_config.h"
#include "shardtrain/model/safetensors.h"

namespace shardtrain {

class TaskModel;

struct HfLoadOptions {
  // The task to build (model.task); unset = the folder's (config.json's
  // architectures). When the folder holds another task's head (e.g. a
  // BertForSequenceClassification fine-tuned before), that head's tensors are
  // left unused and reported, and a new head is initialised: an encoder
  // fine-tuned for one task starts another, as HF does with
  // ignore_mismatched_sizes.
  std::optional<Task> task;
  // Number of labels for the classifier. Allowed to differ from config.json only
  // when the checkpoint has no classifier head (then the head is new anyway);
  // otherwise a mismatch is an error (HF's ignore_mismatched_sizes is not offered).
  std::optional<int64_t> num_labels;
  std::optional<double> hidden_dropout_prob;
  std::optional<double> attention_probs_dropout_prob;
  // Seed for parameters missing from the checkpoint.
  uint64_t init_seed = 42;
};

// What load_hf_folder did with the checkpoint's tensors, in HF's terms.
struct HfLoadReport {
  std::string folder;
  std::vector<std::string> missing_keys;     // model parameters not in the checkpoint (freshly initialised)
  std::vector<std::string> unexpected_keys;  // checkpoint tensors the model does not use
  std::vector<std::string> renamed_keys;     // "old -> new" for gamma/beta and base-prefix fixes
  std::string architecture;                  // "BertForSequenceClassification", ...
  std::string replaced_head;                 // the folder's other-task class whose head was not used, or ""
  size_t num_model_tensors = 0;              // the model's parameters (missing_keys are some of them)
  // The log lines transformers prints for missing / unexpected keys (empty if neither).
  std::string message() const;
};

struct HfModel {
  EncoderConfig config;
  std::shared_ptr<TaskModel> model;
  HfLoadReport report;
};

// Reads config.json (with the overrides in `options`), builds the model on the
// CPU in fp32 and loads the weights. Throws shardtrain::Error naming the file
// for a missing folder, config or weights file, a config.json without
// model_type (as AutoConfig), a pickle-only folder, a bad shard index, a shape
// mismatch, a tensor holding NaN or infinity, or weights that hold none of the
// tensors the model expects (another family's).
HfModel load_hf_folder(const std::string& folder, const HfLoadOptions& options = {});

// The checkpoint tensors of `folder` (model.safetensors or the sharded index),
// by their names in the file(s). A sharded folder gives every tensor of every
// shard its index names, also one the weight_map omits (as transformers loads
// shards whole); a tensor in two shards is an Error naming both.
NamedTensors read_hf_weights(const std::string& folder);

// Copies `checkpoint` (HF names or the legacy/bare variants above) into `model`,
// converting dtypes; parameters it lacks are initialised from `init_seed` and
// reported (how many of how many). Error when it holds none of them, or a
// tensor with NaN or infinity (naming it).
HfLoadReport load_hf_weights(TaskModel& model, const NamedTensors& checkpoint,
                             uint64_t init_seed = 42, const std::string& source = "checkpoint");

struct HfSaveOptions {
  at::ScalarType dtype = at::kFloat;  // dtype of the saved weights (kFloat, kHalf or kBFloat16)
  // Files copied verbatim into the folder (vocab.txt, tokenizer_config.json, ...).
  std::vector<std::string> copy_files;
};

// config.json as save_hf_folder() writes it: the model config plus
// torch_dtype (float32, float16 or bfloat16).
std::string hf_config_json(const EncoderConfig& config, at::ScalarType dtype);

// Writes `folder`/config.json (num_labels, id2label/label2id, architectures
// [config.architecture()], the family's model_type) and
// `folder`/model.safetensors (HF names, contiguous, options.dtype; fixed
// tensors included), then copies options.copy_files. Creates the folder if
// needed. HF transformers loads the result with
// AutoModelForSequenceClassification.from_pretrained(folder).
void save_hf_folder(const TaskModel& model, const std::string& folder,
                    const HfSaveOptions& options = {});

}  // namespace shardtrain
