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

#include <cstdint>
#include <string>
#include <vector>

#include "shardtrain/checkpoint/checkpoint.h"
#include "shardtrain/checkpoint/flat_state.h"
#include "shardtrain/train/train_state.h"

namespace shardtrain {

// Collective: writes `final_path` atomically (CheckpointWriter: .tmp, then
// rename): the parts of every rank (write_flat_state) and the state.
void write_train_checkpoint(const std::string& final_path, const std::vector<FlatTensor>& layout,
                            const std::vector<FlatPart>& parts, const TrainState& state, MPI_Comm comm);
// The same for a rank with a single part.
void write_train_checkpoint(const std::string& final_path, const std::vector<FlatTensor>& layout,
                            const FlatPart& part, const TrainState& state, MPI_Comm comm);

// Local: reads the attributes of train_state_fields() that the file has and
// parses them (parse_train_state()). Error naming the file when it is not a
// training checkpoint, an attribute is missing or of the wrong type, or a value
// is out of range.
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
