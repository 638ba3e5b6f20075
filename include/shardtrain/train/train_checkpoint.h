// Training checkpoints: what `shardtrain train` writes every epoch / N steps
// and what resume reads (docs/DESIGN.md, "Checkpoints").
//
// One HDF5 file (checkpoint/checkpoint.h): the strategy's flat state
// (checkpoint/flat_state.h: /model, /optim/exp_avg, /optim/exp_avg_sq under
// the parameters' names) plus the training state as root attributes
// (TrainState below, one attribute per member, same names): optimizer step,
// epoch and sampler position, seed, schedule, world size and strategy, the
// resolved run config (TOML), the model's HF config.json and its vocabulary
// (so a checkpoint alone is enough to predict or export:
// train/checkpoint_model.h), and the metrics of the report it belongs to.
//
// Any strategy and any world size write and read it. Naming, scanning,
// keep-best and pruning the files of a run folder is
// train/checkpoint_manager.h's.
#pragma once
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "shardtrain/checkpoint/checkpoint.h"
#include "shardtrain/checkpoint/flat_state.h"

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
  // Mixed precision (fp16): steps skipped for non-finite gradients (the
  // optimizer's step count is step - skipped_steps; the learning rate follows
  // it), and the loss scaler. loss_scale 0: no loss scaling. Checkpoints
  // written before these existed read as 0.
  int64_t skipped_steps = 0;
  double loss_scale = 0;
  int64_t loss_scale_good_steps = 0;
  int64_t loss_scale_hysteresis_left = 0;
  // Early stopping (train/early_stopping.h): the best score (NaN: none yet)
  // and its step, evaluations in a row without improvement, and whether
  // training stopped early (1) and why. Older checkpoints read as none / 0.
  double early_stopping_best = std::nan("");
  int64_t early_stopping_best_step = 0;
  int64_t early_stopping_bad_evals = 0;
  int64_t early_stopped = 0;
  std::string stop_reason;
};

// Collective: writes `final_path` atomically (CheckpointWriter: .tmp, then
// rename): the parts of every rank (write_flat_state) and the state.
void write_train_checkpoint(const std::string& final_path, const std::vector<FlatTensor>& layout,
                            const std::vector<FlatPart>& parts, const TrainState& state, MPI_Comm comm);
// The same for a rank with a single part.
void write_train_checkpoint(const std::string& final_path, const std::vector<FlatTensor>& layout,
                            const FlatPart& part, const TrainState& state, MPI_Comm comm);

// Local: the attributes. Error naming the file when it is not a training
// checkpoint or an attribute is missing.
TrainState read_train_state(const CheckpointReader& reader);

// Warnings for resuming `state` in the middle of its epoch under this job's
// `data` config: data.group_by_length changed since the checkpoint (its stored
// config_toml says) reorders the rest of the epoch, so some rows would be
// trained on twice and others not at all. Empty when nothing applies (at an
// epoch boundary, or a checkpoint without a stored config).
std::vector<std::string> resume_data_order_warnings(const TrainState& state, bool group_by_length);

// Collective: read_flat_state() for one part (with optimizer state exactly
// when part.exp_avg is defined) or several.
void read_train_part(CheckpointReader& reader, const std::vector<FlatTensor>& layout, FlatPart& part);
void read_train_parts(CheckpointReader& reader, const std::vector<FlatTensor>& layout, std::vector<FlatPart>& parts,
                      bool with_optimizer);

}  // namespace shardtrain
