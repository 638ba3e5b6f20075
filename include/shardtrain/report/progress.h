// Training progress: the live line on a terminal (rank 0), plain log lines,
// progress.csv rows and TensorBoard scalars every train.log_every_steps steps
// (docs/DESIGN.md, "The run folder"). Throughput is measured over the window
// since the last logged step.
//
//   ProgressMeter meter(config.train, plan_total_steps, num_epochs, first_step, trained_before, live, &folder);
//   meter.record({step, epoch_float, loss, lr, grad_norm, samples, tokens});   // after every step, every rank
//   meter.end_line();                                                       // before other output
#pragma once
#include <cstdint>
#include <string>

#include "shardtrain/core/run_config.h"

namespace shardtrain {

class RunFolder;
class TensorBoardWriter;

// One optimizer step as the job saw it (every rank alike).
struct StepRecord {
  int64_t step = 0;        // steps done, this one included
  double epoch = 0;        // fractional epoch
  double loss = 0;         // mean over ranks and micro-batches
  double lr = 0;
  double grad_norm = 0;
  int64_t samples = 0;     // examples in the step, all ranks
  double tokens = 0;       // real tokens in the step, all ranks
  double loss_scale = 0;   // fp16 loss scale after this step; 0 = no loss scaling
  int64_t skipped_steps = 0;  // steps skipped so far for non-finite gradients
};

// The sums of the steps since the last logged row (train.log_every_steps):
// what the next row averages. Checkpoints carry them (train/train_state.h), so
// the first row after a resume averages the same steps as an uninterrupted
// run's. Throughput restarts at the resume (it is a rate over wall time).
struct ProgressWindow {
  double loss_sum = 0;
  double grad_norm_sum = 0;
  int64_t steps = 0;
};

class ProgressMeter {
 public:
  // `trained_before`: seconds trained by earlier invocations (resume);
  // `live`: a live line on stderr (rank 0 and a terminal only);
  // `folder`: where progress.csv is (rank 0 writes it); `tensorboard`: rank
  // 0's event writer, or null.
  // `invocation_start`: MPI_Wtime() when this invocation began; the first
  // step's line in train.log says how long after it the step was done
  // (building the job, resuming, the first step). `resumed`: the window the
  // checkpoint resumed from was in.
  ProgressMeter(const TrainConfig& train, int64_t total_steps, int64_t num_epochs, int64_t first_step,
                double trained_before, bool live, RunFolder& folder, TensorBoardWriter* tensorboard,
                double invocation_start, const ProgressWindow& resumed = {});

  void record(const StepRecord& step);
  // Ends the live line (before other output goes to the terminal).
  void end_line();
  // Training time so far, earlier invocations included.
  double elapsed_total() const;
  // The steps since the last logged row, for a checkpoint.
  ProgressWindow window() const { return {window_loss_, window_norm_, window_steps_}; }

 private:
  int64_t log_every_steps_;
  int64_t total_steps_, num_epochs_, first_step_;
  double trained_before_, start_, invocation_start_;
  bool live_;
  int rank_ = 0;
  RunFolder& folder_;
  TensorBoardWriter* tensorboard_;
  double window_start_, window_loss_ = 0, window_norm_ = 0, window_tokens_ = 0, last_live_ = 0;
  int64_t window_steps_ = 0, window_samples_ = 0;
};

// "1m05s", "2h03m", "7s"; "?" for a negative or non-finite duration.
std::string format_duration(double seconds);

}  // namespace shardtrain
