// The run folder <run.storage_path>/<run.name>/ and its small files
// (docs/DESIGN.md, "The run folder"):
//
//   config.toml    the resolved config, rewritten at every start that trains
//   train.log      everything rank 0 logs (and warnings of all ranks)
//   progress.csv   step,epoch,loss,lr,grad_norm,samples_per_s,tokens_per_s,elapsed_s,loss_scale,skipped_steps
//                  (loss_scale 0: no loss scaling)
//   tensorboard/   TensorBoard event files (report/tensorboard.h)
//   curves.svg     loss, metrics and lr against the step (report/curves.h), rewritten at every report
//   result.jsonl   one JSON object per report
//   checkpoint_*.h5                          (train/checkpoint_manager.h)
//
// A resumed run cuts result.jsonl and progress.csv back to the checkpoint's
// step, so an interrupted and resumed run leaves the same files (up to timing
// columns) as one never interrupted. start() is the first write to the folder,
// train.log included (rank 0's lines are held in memory until then): train()
// calls it only once every check that can refuse the job has passed, and not
// at all when there is nothing to train; a refused job's train.log gets only
// the error (cli's train command appends it).
//
//   RunFolder folder(config.run, comm);            // collective: rank 0 creates it
//   folder.start(config_toml, resumed_step);       // collective
//   if (rank == 0) folder.append_result(line);     // rank 0 only
#pragma once
#include <mpi.h>

#include <cstdint>
#include <optional>
#include <string>

#include "shardtrain/core/run_config.h"

namespace shardtrain {

class RunFolder {
 public:
  // Collective: rank 0 creates the folder (Error naming run.storage_path, or
  // the run folder when that path is a file, when it cannot), and rank 0's log
  // is held for its train.log from now on (written there at start()).
  RunFolder(const JobConfig& run, MPI_Comm comm);
  ~RunFolder();  // rank 0's log stops going to train.log
  RunFolder(const RunFolder&) = delete;
  RunFolder& operator=(const RunFolder&) = delete;

  const std::string& dir() const { return dir_; }
  int rank() const { return rank_; }  // in the job's communicator
  MPI_Comm comm() const { return comm_; }
  std::string file(const std::string& name) const;

  // Collective (rank 0 writes): the held log lines into train.log, config.toml,
  // and result.jsonl / progress.csv emptied for a fresh run (resumed_step
  // unset) or cut after resumed_step.
  void start(const std::string& config_toml, std::optional<int64_t> resumed_step);

  // Rank 0 only: the reports result.jsonl holds now (read from the file).
  int64_t count_recorded_reports() const;

  // Rank 0 only.
  int64_t num_reports() const { return num_reports_; }
  void append_result(const std::string& json_line);
  void append_progress(const std::string& csv_row);

 private:
  MPI_Comm comm_;
  int rank_ = 0;
  std::string dir_;
  int64_t num_reports_ = 0;
};

}  // namespace shardtrain
