// The training job: what `shardtrain train` runs on every rank
// (docs/DESIGN.md, "The training job"). train() reads as the job:
//
//   build      train/job.h: topology, device, communicator, tokenizer and data
//              (tokenized across ranks), the model (HF folder or random init
//              from train.seed; rank 0's weights broadcast), the strategy, the
//              sampler, the step plan and the learning-rate schedule
//   resume     train/checkpoint_manager.h: from TrainOptions::resume_from, else
//              the newest checkpoint of the run folder, if any: weights, AdamW
//              state, optimizer step, epoch and sampler position
//   loop       train/train_step.h: one optimizer step per
//              gradient_accumulation_steps micro-batches (clipping, AdamW,
//              dropout reseeded per micro-step from (seed, step, micro-step, rank));
//              report/progress.h: the progress line and progress.csv
//   report     after every epoch (and every train.eval_every_steps): sharded
//              eval gathered exactly (train/evaluate.h), a line in result.jsonl
//              (report/run_folder.h), TensorBoard scalars and curves.svg, a
//              checkpoint when the manager says one is due
//              (checkpoint.every_epochs / every_steps, keep-best-N); early
//              stopping on checkpoint.score_attribute (train/early_stopping.h)
//
// Mixed precision (train.mixed_precision): the strategy trains in the 16-bit
// dtype with fp32 master weights; fp16 adds loss scaling, and a step whose
// gradients are not finite is skipped on every rank and counted, without
// moving the learning-rate schedule (which follows the applied updates).
//
// Run folder <run.storage_path>/<run.name>/: see report/run_folder.h.
#pragma once
#include <ATen/core/Tensor.h>
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "shardtrain/core/run_config.h"
#include "shardtrain/train/evaluate.h"

namespace shardtrain {

struct TrainOptions {
  std::string config_toml;   // saved as <run dir>/config.toml and in checkpoints
  std::string resume_from;   // a checkpoint file; "" = the run folder's newest, if any
  // Start from step 0 although the run folder holds records of an earlier run
  // (reports in result.jsonl, checkpoints that all fail their checks) and no
  // checkpoint to resume from; without it such a job is refused, the folder
  // untouched. The damaged checkpoints are set aside, the records replaced.
  bool restart = false;
  // Tests: return right after this many optimizer steps (counted from the
  // start of training, not of this invocation), writing nothing more — what a
  // job killed at that point leaves behind. 0 = off.
  int64_t stop_after_step = 0;
  // Show a live progress line (rank 0, stderr is a terminal); otherwise plain
  // lines every train.log_every_steps.
  bool live_progress = true;
  // Tests of fp16 loss scaling without a GPU: run the loss scaler whatever
  // train.mixed_precision says, and make world rank `overflow_rank`'s
  // gradients non-finite at these steps (1-based, counted from the start of
  // training), as an fp16 overflow would.
  bool force_loss_scaling = false;
  std::vector<int64_t> overflow_steps;
  int overflow_rank = 0;
  // Called on every rank after each evaluation with its metrics and the
  // optimizer step (the same on every rank); it must return the same on every
  // rank: "" to go on, or the reason to stop here (a sweep's scheduler pruning
  // the trial, sweep/runner.h). A stop ends training as early stopping does:
  // a checkpoint of this step, and a re-run has nothing to do.
  std::function<std::string(const std::map<std::string, double>& metrics, int64_t step)> on_evaluation;
};

struct TrainReport {
  int64_t epoch = 0;  // epochs completed when the report was made: the checkpoint's epoch (`inspect`)
  int64_t step = 0;   // optimizer steps done
  std::map<std::string, double> metrics;  // train_loss, eval_loss, eval_accuracy, eval_f1, ...
  std::string checkpoint;                 // written with this report, or ""
  std::string stop_reason;                // "early stopping: ..." when training stops here, or ""
};

struct TrainResult {
  std::string run_dir;
  std::string resumed_from;        // "" when started fresh
  int64_t steps = 0;               // optimizer steps done at the end
  int64_t skipped_steps = 0;       // of those, skipped for non-finite gradients (loss scaling)
  int64_t num_training_steps = 0;  // planned
  bool finished = false;           // false when stopped by stop_after_step or SIGTERM
  bool preempted = false;          // stopped at a step boundary for SIGTERM (train/preemption.h)
  bool stopped_early = false;      // by early stopping (finished too)
  bool nothing_to_do = false;      // resumed a finished or stopped run: the run folder was left as it was
  std::string stop_reason;
  // Classification with eval data: the majority class's scores, to compare with.
  std::optional<Baseline> baseline;
  std::vector<TrainReport> reports;  // made by this invocation
  std::string last_checkpoint;
  std::string best_checkpoint;     // by checkpoint.score_attribute ("" without one)
  at::Tensor final_params;         // flat parameters (layout order, unpadded), CPU copy
  std::vector<std::string> param_names;  // layout order
};

// Collective over comm: every rank calls it with the same config. Throws
// shardtrain::Error (the same on every rank where it can) for anything the
// user can fix: files, columns, labels, a checkpoint that does not fit.
TrainResult train(const RunConfig& config, MPI_Comm comm, const TrainOptions& options = {});

}  // namespace shardtrain
