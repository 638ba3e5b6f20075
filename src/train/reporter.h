// Private to the train layer: the reports of trainer.cpp's loop (eval
// metrics, a checkpoint when asked, a line in result.jsonl, TensorBoard
// scalars, curves.svg and a line in the log), and its stop for a SIGTERM.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "shardtrain/report/progress.h"
#include "shardtrain/report/run_folder.h"
#include "shardtrain/report/tensorboard.h"
#include "shardtrain/train/checkpoint_manager.h"
#include "shardtrain/train/early_stopping.h"
#include "shardtrain/train/job.h"
#include "shardtrain/train/train_state.h"
#include "shardtrain/train/trainer.h"
#include "train/position.h"

namespace shardtrain::train_detail {

class Reporter {
 public:
  Reporter(TrainJob& job, CheckpointManager& checkpoints, RunFolder& folder, ProgressMeter& meter,
           TensorBoardWriter* tensorboard, const TrainOptions& options, TrainResult& result)
      : job_(job), checkpoints_(checkpoints), folder_(folder), meter_(meter), tensorboard_(tensorboard),
        options_(options), result_(result), early_(job.config->train, job.config->checkpoint) {}

  // `last`: the end of training, where early stopping stops nothing.
  void report(Position& at, bool with_checkpoint, bool with_eval, int64_t epochs_done, bool last = false);

  // At a step boundary, on every rank: stop for a SIGTERM that any rank got,
  // with one emergency checkpoint of this step if it fits in the grace period
  // (train/preemption.h). Not a report: result.jsonl and TensorBoard get
  // nothing, and the checkpoint keeps the loss since the last report.
  bool stop_for_preemption(const Position& at);

  // Records a checkpoint of this step just written; returns its seconds.
  double saved(const Position& at, double start) {
    const double seconds = MPI_Wtime() - start;
    saved_step_ = at.step;
    longest_checkpoint_s_ = std::max(longest_checkpoint_s_, seconds);
    return seconds;
  }
  void resumed_at(int64_t step) { saved_step_ = step; }

 private:
  // The metrics are the same on every rank (gathered logits); rank 0's
  // decision is broadcast all the same, so that the ranks cannot part ways.
  void update_early_stopping(Position& at, TrainReport& report, bool last);
  TrainState state_at(const Position& at, const nlohmann::json& metrics) const;
  // Rank 0: result.jsonl, TensorBoard, curves.svg and the log line.
  void write(const TrainReport& report);

  TrainJob& job_;
  CheckpointManager& checkpoints_;
  RunFolder& folder_;
  ProgressMeter& meter_;
  TensorBoardWriter* tensorboard_;
  const TrainOptions& options_;
  TrainResult& result_;
  EarlyStopping early_;
  int64_t saved_step_ = 0;            // the step of the newest checkpoint (resumed from or written)
  double longest_checkpoint_s_ = 0;   // this rank's longest checkpoint write in this job
};

}  // namespace shardtrain::train_detail
