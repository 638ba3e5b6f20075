// The model inside a training checkpoint (train/train_checkpoint.h), for
// `inspect`, `export` and `predict --model CKPT`: a checkpoint stores the
// model's HF config.json and its vocabulary, so it is all these need.
//
//   CheckpointModel m = load_checkpoint_model("runs/x/checkpoint_000003.h5", comm);
//   Tokenizer tokenizer = checkpoint_tokenizer(m.state, path);
//   export_checkpoint_safetensors(path, "out/model.safetensors", at::kBFloat16);  // tensor by tensor
#pragma once
#include <ATen/core/Tensor.h>
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shardtrain/checkpoint/checkpoint.h"
#include "shardtrain/data/tokenizer.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/train/train_checkpoint.h"

namespace shardtrain {

// The model of a checkpoint on the CPU (fp32, in eval mode), with its HF
// config and tokenizer inputs. Build its tokenizer with checkpoint_tokenizer.
struct CheckpointModel {
  EncoderConfig config;
  std::shared_ptr<TaskModel> model;
  std::string vocab_text;
  bool lowercase = false;
  TrainState state;
};
// Collective over comm (every rank gets the whole model). A LoRA checkpoint
// (state.lora_json) holds only the adapter and the modules to save: the
// frozen base is loaded from its recorded folder, or from `base_folder` when
// given (the base moved), and must have the recorded sha256
// (train/lora_run.h); the model returned has the adapter added (model->lora()).
CheckpointModel load_checkpoint_model(const std::string& path, MPI_Comm comm, const std::string& base_folder = "");

// The tokenizer a checkpoint saved: its tokenizer_files attribute, or, in
// checkpoints written before that existed, vocab_text with lowercase
// (WordPiece). `path` names the checkpoint in errors.
Tokenizer checkpoint_tokenizer(const TrainState& state, const std::string& path);

// The tensors a checkpoint of a model with `config` holds under /model, in
// the model's state-dict order (HF order, the order export writes), with
// their shapes and offsets in the flat layout: equal to
// flat_tensors(ParamLayout(model.state_dict())), computed without allocating
// the model. Error naming `source` for an invalid config.
std::vector<FlatTensor> model_flat_tensors(const EncoderConfig& config, const std::string& source = "config",
                                           const LoraSpec* lora = nullptr);

// The tensors the training checkpoint `path` with `state` holds under /model:
// model_flat_tensors() of its model config, or of its LoRA adapter (the
// adapters and the modules to save) when state.lora_json is set.
std::vector<FlatTensor> checkpoint_flat_tensors(const TrainState& state, const std::string& path);

// What export_checkpoint_safetensors() did.
struct CheckpointExport {
  TrainState state;
  EncoderConfig config;           // from the model_config_json attribute
  int64_t tensors = 0;         // tensors written
  int64_t model_bytes = 0;     // bytes of all /model tensors as stored (float32)
  int64_t largest_tensor_bytes = 0;  // the largest one of them, as stored
  // The most weight bytes held at once: the tensor just read plus the
  // temporary copies the writer made for it (the converted chunk for float16 /
  // bfloat16). For float32 exactly largest_tensor_bytes.
  int64_t peak_bytes_held = 0;
  uint64_t file_bytes = 0;     // size of the safetensors file written
};

// Local, no collective (the file is opened on MPI_COMM_SELF), so one rank
// calls it alone: writes the /model tensors of the training checkpoint `path`
// to the safetensors file `output` (atomically, SafetensorsStreamWriter) in
// `dtype` (float32, float16 or bfloat16), with HF names in HF order, reading,
// converting and appending one tensor at a time and dropping it before the
// next. The bytes equal write_safetensors() of load_checkpoint_model()'s
// state dict converted to `dtype`. Error naming the file and tensor when the
// checkpoint's tensors do not match its model config (as read_train_part).
CheckpointExport export_checkpoint_safetensors(const std::string& path, const std::string& output,
                                               at::ScalarType dtype = at::kFloat);

// True when `path` is a regular file that starts with the 8-byte HDF5
// signature, i.e. a checkpoint rather than a HF folder. Local; never throws.
bool is_checkpoint_file(const std::string& path);

}  // namespace shardtrain
