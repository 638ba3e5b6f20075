// CheckpointManager: the one owner of a run folder's checkpoints (torchtitan's
// CheckpointManager; docs/DESIGN.md, "Checkpoints"): when to write one
// (cadence), what it is called (one filename pattern), which ones exist
// (scanning), which to keep (keep-best-N by a metric, the newest always
// kept), pruning, and which one a run resumes from and how.
//
//   checkpoint_000001.h5, checkpoint_000002.h5, ...   (index = 1, 2, ... in write order)
//
//   CheckpointManager checkpoints(folder.dir(), config.checkpoint, comm);  // collective: rank 0 scans
//   std::string resume = checkpoints.resume_path(options.resume_from);     // "" = none to resume
//   ... every check that can refuse the job ...
//   checkpoints.set_aside_damaged();                                       // now the folder may change
//   if (checkpoints.due(step, epoch_end, epochs_done, last)) checkpoints.save(layout, parts, state);
#pragma once
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "shardtrain/core/run_config.h"
#include "shardtrain/train/train_checkpoint.h"

namespace shardtrain {

class Strategy;

// "<run_dir>/checkpoint_000003.h5" for index 3.
std::string checkpoint_path(const std::string& run_dir, int64_t index);
// The index in a checkpoint file name, or -1 when `path` is not one (a
// temporary file, another file). Local.
int64_t checkpoint_index(const std::string& path);
// The complete checkpoint of `run_dir` with the highest index, or "" when
// there is none or run_dir does not exist. Local, no MPI.
std::string latest_checkpoint(const std::string& run_dir);
// The highest checkpoint index used in `run_dir`, counting complete files and
// set-aside ones ("checkpoint_000004.h5.damaged"), so a new checkpoint never
// reuses the number of a damaged one; 0 when there is none. Local.
int64_t highest_checkpoint_index(const std::string& run_dir);
// Renames a checkpoint that failed to verify to "<path>.damaged" (or
// "<path>.damaged-2", ... when that exists), so that latest_checkpoint() no
// longer sees it and nothing is deleted; returns the new path. Local. Error
// naming both paths and the reason when the rename fails.
std::string set_aside_damaged_checkpoint(const std::string& path);

class CheckpointManager {
 public:
  // Collective: rank 0 scans run_dir for the checkpoints there (and reads the
  // score each was written with). New checkpoints are numbered after the
  // highest index used, set-aside damaged ones included.
  CheckpointManager(std::string run_dir, const CheckpointConfig& config, MPI_Comm comm);

  // Collective: the checkpoint to resume from, verified in full on rank 0
  // (verify_checkpoint: every dataset read, checksums compared):
  //   `requested` (--resume): Error when it is not a file or fails to verify;
  //   otherwise the run folder's newest that verifies; a damaged newer one is
  //   recorded (damaged(), with a warning naming the problem) and the next
  //   older one is tried; "" = none. Nothing in the folder changes here.
  std::string resume_path(const std::string& requested);

  // Collective: the checkpoints resume_path found damaged, one "<path>: <problem>"
  // each, newest first (the same on every rank).
  std::vector<std::string> damaged() const;

  // Collective: renames the checkpoints resume_path found damaged to
  // "<name>.damaged" (set_aside_damaged_checkpoint; never deleted). Called
  // once the job has passed every check that can refuse it, so that a refused
  // job leaves the run folder as it was.
  void set_aside_damaged();

  // Collective: reads the training state of `path`, lets `check` refuse it
  // (throw Error: the same on every rank, since every rank reads the same
  // attributes) before any tensor is read, then fills the strategy's parts
  // and finishes the load.
  TrainState restore(const std::string& path, Strategy& strategy, const std::vector<FlatTensor>& layout,
                     const std::function<void(const TrainState&)>& check) const;

  // Whether a report at this point writes a checkpoint: every
  // checkpoint.every_steps steps, at the end of every checkpoint.every_epochs
  // epochs, and always at the end of training (`last`).
  bool due(int64_t step, bool epoch_end, int64_t epochs_done, bool last) const;

  // Collective: writes the next checkpoint (strategy's parts, `state`),
  // records its score (checkpoint.score_attribute in state.metrics_json),
  // deletes the ones keep-best-N no longer keeps; returns its path.
  std::string save(const std::vector<FlatTensor>& layout, const std::vector<FlatPart>& parts, const TrainState& state);

  // Collective: the newest checkpoint and the best by score_attribute ("" when
  // none / no attribute), the same on every rank.
  std::string newest() const;
  std::string best() const;

 private:
  struct Kept {
    int64_t index = 0;
    std::string path;
    std::optional<double> score;
  };
  void prune();  // rank 0

  std::string run_dir_;
  CheckpointConfig config_;
  MPI_Comm comm_;
  int rank_ = 0;
  std::vector<Kept> kept_;  // rank 0: complete checkpoints, oldest first
  std::vector<std::string> damaged_paths_;     // rank 0: found damaged by resume_path, newest first
  std::vector<std::string> damaged_problems_;  // rank 0: why, in the same order
  int64_t next_index_ = 1;
};

}  // namespace shardtrain
