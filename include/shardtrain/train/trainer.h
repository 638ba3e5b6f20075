// The training job: what `shardtrain train` runs on every rank.
//
//   build      tokenizer, train / eval tables tokenized across ranks, the model
//              (HF folder or random init from train.seed), the strategy
//              (parallel.strategy) that wraps it; rank 0's weights broadcast
//   resume     from TrainOptions::resume_from, else from the newest complete
//              checkpoint of the run folder, if any: weights, AdamW state,
//              optimizer step, epoch and sampler position
//   train      global batches from the DistributedSampler (seed + epoch), one
//              optimizer step per gradient_accumulation_steps micro-batches,
//              clipping, AdamW, linear warmup/decay (optim/); dropout reseeded
//              per micro-step from (seed, step, micro-step, rank)
//   report     after every epoch (and every train.eval_every_steps): sharded
//              eval gathered exactly (each example once), metrics, a line in
//              result.jsonl, a checkpoint (checkpoint.every_epochs /
//              every_steps), keep-best-N pruning
//
// Run folder <run.storage_path>/<run.name>/:
//   config.toml          the resolved config (TrainOptions::config_toml)
//   train.log            everything rank 0 logged (and warnings of all ranks)
//   progress.csv         step,epoch,loss,lr,grad_norm,samples_per_s,tokens_per_s,elapsed_s
//   result.jsonl         one JSON object per report: epoch, step, metrics, timing, checkpoint
//   checkpoint_000001.h5 ...
//
// Resuming rewrites result.jsonl and progress.csv without the lines past the
// checkpoint's step, so an interrupted and resumed run leaves the same files
// (up to timing columns) as one that was never interrupted.
#pragma once
#include <ATen/core/Tensor.h>
#include <mpi.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shardtrain/core/run_config.h"

namespace shardtrain {

struct TrainOptions {
  std::string config_toml;   // saved as <run dir>/config.toml and in checkpoints
  std::string resume_from;   // a checkpoint file; "" = the run folder's newest, if any
  bool no_resume = false;    // start from scratch even if the run folder has checkpoints
  // Tests: return right after this many optimizer steps (counted from the
  // start of training, not of this invocation), writing nothing more — what a
  // job killed at that point leaves behind. 0 = off.
  int64_t stop_after_step = 0;
  // Show a live progress line (rank 0, stderr is a terminal); otherwise plain
  // lines every train.log_every_steps.
  bool live_progress = true;
};

struct TrainReport {
  int64_t epoch = 0;  // epochs completed when the report was made (fractional epochs: the one in progress + 1)
  int64_t step = 0;   // optimizer steps done
  std::map<std::string, double> metrics;  // train_loss, eval_loss, eval_accuracy, eval_f1, ...
  std::string checkpoint;                 // written with this report, or ""
};

struct TrainResult {
  std::string run_dir;
  std::string resumed_from;        // "" when started fresh
  int64_t steps = 0;               // optimizer steps done at the end
  int64_t num_training_steps = 0;  // planned
  bool finished = false;           // false when stopped by stop_after_step
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
