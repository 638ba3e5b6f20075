// Training checkpoints: what `shardtrain train` writes every epoch / N steps,
// and what resume, `inspect`, `export` and `predict --model CKPT` read.
//
// One HDF5 file (checkpoint/checkpoint.h), an ordinary state dict:
//   /model/<hf name>              parameters, float32, true shapes
//   /optim/exp_avg/<hf name>      AdamW first moment, same names and shapes
//   /optim/exp_avg_sq/<hf name>   AdamW second moment
//   root attributes (kTrainAttributes below): the training state — optimizer
//   step, epoch and sampler position, seed, schedule, world size and strategy,
//   the resolved run config (TOML), the model's HF config.json and its
//   vocabulary (so a checkpoint alone is enough to predict or export), and the
//   metrics of the report it belongs to.
//
// Any strategy and any world size write and read it: each rank passes the part
// of the flat buffers (param_layout.h order) it owns (DDP: an equal 1/W part
// of its full copy, so all ranks write in parallel; ZeRO: its shard), and a
// reader asks for whatever part it wants.
//
// RNG: dropout masks are drawn from the default generator, reseeded before
// every micro-step from (seed, optimizer step, micro-step, rank)
// (train_rng_seed), so no generator state has to be saved for an exact resume.
#pragma once
#include <ATen/core/Tensor.h>
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shardtrain/checkpoint/checkpoint.h"
#include "shardtrain/model/bert.h"
#include "shardtrain/optim/param_layout.h"

namespace shardtrain {

// Value of the "kind" attribute of a training checkpoint.
inline constexpr const char* kTrainCheckpointKind = "shardtrain-train-checkpoint";

// Everything but the tensors. Attribute names are the member names.
struct TrainState {
  int64_t step = 0;              // optimizer updates done
  int64_t epoch = 0;             // sampler epoch to continue in
  int64_t batches_consumed = 0;  // global micro-batches of `epoch` already trained on
  int64_t seed = 42;
  int64_t num_training_steps = 0;
  int64_t warmup_steps = 0;
  double base_lr = 0;
  int64_t world_size = 1;        // of the job that wrote it
  int64_t global_batch_size = 0; // examples per optimizer step (batch x ranks x accumulation)
  std::string strategy = "ddp";
  std::string config_toml;       // resolved run config
  std::string model_config_json; // the model's HF config.json (num_labels, id2label, dropout, ...)
  std::string vocab_text;        // vocab.txt content
  int64_t lowercase = 0;         // tokenizer lowercases (uncased vocabulary)
  std::string metrics_json = "{}";  // {"eval_f1": ..., ...} of the report this checkpoint belongs to
  // Training-loss accumulator since the last report (so a resumed run reports
  // the same train_loss), and wall time trained so far.
  double loss_sum = 0;
  int64_t loss_count = 0;
  double train_seconds = 0;
};

// A rank's part of the flat buffers: elements [begin, begin + params.numel())
// of the layout. exp_avg / exp_avg_sq: same numel, or undefined (model only;
// then on every rank alike). Any device and float dtype; the checkpoint holds
// float32. Elements past the layout's end (ZeRO padding) are ignored when
// writing and left as they are when reading.
struct FlatPart {
  int64_t begin = 0;
  at::Tensor params;
  at::Tensor exp_avg;
  at::Tensor exp_avg_sq;
};

// The layout as the checkpoint layer sees it (name, shape, offset per slot).
std::vector<FlatTensor> flat_tensors(const ParamLayout& layout);

// Collective: writes `final_path` atomically (CheckpointWriter: .tmp, then
// rename). The parts of all ranks must tile the layout's elements exactly.
void write_train_checkpoint(const std::string& final_path, const std::vector<FlatTensor>& layout,
                            const FlatPart& part, const TrainState& state, MPI_Comm comm);
// The same with several parts per rank (a sharded strategy owns one piece of
// every unit): at least one part per rank (an empty one when it owns nothing),
// all with or all without optimizer state; written in one collective write per
// group.
void write_train_checkpoint(const std::string& final_path, const std::vector<FlatTensor>& layout,
                            const std::vector<FlatPart>& parts, const TrainState& state, MPI_Comm comm);

// Local: the attributes. Error naming the file when it is not a training
// checkpoint or an attribute is missing.
TrainState read_train_state(const CheckpointReader& reader);

// Collective: fills part.params (and exp_avg / exp_avg_sq when defined) from
// the checkpoint; any part, whatever partition wrote it. Error, naming the file
// and tensor, when the checkpoint's tensors do not match the layout (a tensor
// missing or extra, another shape), or when optimizer state is asked for and
// the checkpoint has none. Every rank checks the same file metadata, so all
// throw alike.
void read_train_part(CheckpointReader& reader, const std::vector<FlatTensor>& layout, FlatPart& part);
// The same for several parts, in one collective read per group; every part
// has optimizer tensors exactly when with_optimizer (which every rank passes
// alike).
void read_train_parts(CheckpointReader& reader, const std::vector<FlatTensor>& layout, std::vector<FlatPart>& parts,
                      bool with_optimizer);

// The model of a checkpoint on the CPU (fp32, in eval mode), with its HF
// config and tokenizer inputs; for inspect / export / predict --model CKPT.
// Build its tokenizer with Tokenizer::from_vocab_text(vocab_text, options with
// lowercase).
struct CheckpointModel {
  BertConfig config;
  std::shared_ptr<BertForSequenceClassification> model;
  std::string vocab_text;
  bool lowercase = false;
  TrainState state;
};
// Collective over comm (every rank gets the whole model).
CheckpointModel load_checkpoint_model(const std::string& path, MPI_Comm comm);

// The tensors a checkpoint of a model with `config` holds under /model, in
// the model's state-dict order (HF order, the order export writes), with
// their shapes and offsets in the flat layout: equal to
// flat_tensors(ParamLayout(model.state_dict())), computed without allocating
// the model. Error naming `source` for an invalid config.
std::vector<FlatTensor> model_flat_tensors(const BertConfig& config, const std::string& source = "config");

// What export_checkpoint_safetensors() did.
struct CheckpointExport {
  TrainState state;
  BertConfig config;           // from the model_config_json attribute
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

// Seed of the default generator for a micro-step: a SplitMix64 hash of
// (seed, step, micro_step, rank).
uint64_t train_rng_seed(int64_t seed, int64_t step, int64_t micro_step, int rank);

}  // namespace shardtrain
