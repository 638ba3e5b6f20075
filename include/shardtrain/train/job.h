// TrainJob: everything `train` builds before the first step, in one place
// (docs/DESIGN.md, "The training job"):
//
//   topology      ranks, nodes, shard groups (parallel/topology.h)
//   device        cpu, or the GPU of this rank's local rank (run.device)
//   communicator  NCCL on a GPU, MPI on the CPU: the strategy's; host_comm
//                 (MPI) for the job's own host-side reductions
//   data          the tokenizer, the train / eval tables read, checked and
//                 tokenized across the ranks
//   model         a HF folder (model.init = "pretrained") or model.config +
//                 random init seeded by train.seed; rank 0's weights broadcast
//   strategy      parallel.strategy wrapping the model (parallel/make_strategy.h)
//   sampler       the DistributedSampler over the training data
//   plan          steps per epoch, total steps, warmup: derived once
//   schedule      the learning rate of every optimizer update (train.lr_scheduler_type)
//   precision     the strategy's dtypes; loss_scaler for fp16
//
//   TrainJob job = build_job(config, comm);   // collective
//   std::vector<Batch> micro = job.next_micro_batches();
#pragma once
#include <ATen/core/Tensor.h>
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shardtrain/checkpoint/checkpoint.h"
#include "shardtrain/comm/communicator.h"
#include "shardtrain/core/run_config.h"
#include "shardtrain/data/collator.h"
#include "shardtrain/data/dataset.h"
#include "shardtrain/data/sampler.h"
#include "shardtrain/data/tokenizer.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/optim/loss_scaler.h"
#include "shardtrain/optim/schedule.h"
#include "shardtrain/parallel/frozen_shards.h"
#include "shardtrain/parallel/strategy.h"
#include "shardtrain/parallel/topology.h"
#include "shardtrain/tasks/task_spec.h"

namespace shardtrain {

// The run's shape, derived once from the config and the data.
struct TrainPlan {
  int64_t world_size = 1;
  int64_t batch_size = 0;           // per rank per micro-step
  int64_t accumulation = 1;         // micro-steps per optimizer step
  int64_t global_batch = 0;         // examples per micro-step, all ranks (batch x ranks)
  int64_t batches_per_epoch = 0;    // global micro-batches
  int64_t steps_per_epoch = 0;
  int64_t total_steps = 0;
  int64_t num_epochs = 0;
  int64_t warmup_steps = 0;
  int64_t examples_per_step() const { return global_batch * accumulation; }
};

struct TrainJob {
  const RunConfig* config = nullptr;
  MPI_Comm comm = MPI_COMM_NULL;
  Topology topology;
  at::Device device = at::kCPU;
  // Declared before what uses them, so they are destroyed after it.
  std::unique_ptr<Communicator> communicator;
  std::unique_ptr<Communicator> host_comm;  // MPI, for host-side scalars (the step's loss)
  std::optional<Tokenizer> tokenizer;
  std::string vocab_text;       // WordPiece vocabulary (one token a line); empty for BPE
  std::string tokenizer_files;  // Tokenizer::saved_files(): what checkpoints store to rebuild it
  // The task's tables as read (tasks/task_spec.h) and their tokenized data.
  std::unique_ptr<TaskTable> train_table, eval_table;
  TokenizedDataset train_data;
  std::optional<TokenizedDataset> eval_data;
  // The model's labels: the data's names (or the model's), the head's size
  // once the model is built.
  TaskLabels labels;
  std::shared_ptr<TaskModel> model;
  EncoderConfig saved_config;  // what checkpoints and exports record (label names of the data)
  std::unique_ptr<Strategy> strategy;
  // LoRA (config.lora): the frozen base's identity (train/lora_run.h), and
  // under zero3 / hybrid its shards (declared after the strategy: removed first).
  std::string base_model_sha256;
  std::unique_ptr<FrozenShards> frozen_shards;
  std::vector<FlatTensor> flat_layout;
  std::optional<DistributedSampler> sampler;
  TrainPlan plan;
  std::optional<LrSchedule> schedule;
  MixedPrecision precision;                      // the strategy's dtypes (mixed_precision_for)
  std::optional<DynamicLossScaler> loss_scaler;  // fp16 (or TrainJobOptions::force_loss_scaling)

  // This rank's next micro-batches of the epoch (up to plan.accumulation), on
  // the device; empty at the end of the epoch.
  std::vector<Batch> next_micro_batches();
  // The fractional epoch the sampler stands at.
  double epoch_position() const;
  bool epoch_done() const { return sampler->state().batches_consumed >= plan.batches_per_epoch; }
};

// Tests: loss scaling on a run that is not fp16 (the overflow path runs on CPU).
struct TrainJobOptions {
  bool force_loss_scaling = false;
};

// Collective over comm: builds every part of the job (see the file comment).
// Throws shardtrain::Error, the same on every rank where it can, for anything
// the user can fix: files, columns, labels, a model that does not fit.
TrainJob build_job(const RunConfig& config, MPI_Comm comm, const TrainJobOptions& options = {});

// The loss scaler train.fp16.* describes: dynamic (loss_scale 0: starts at
// 2^initial_scale_power) or static (loss_scale > 0).
DynamicLossScaler make_loss_scaler(const Fp16Config& fp16);

}  // namespace shardtrain
