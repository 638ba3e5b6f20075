// Builds the Strategy a run config's [parallel] section names.
//
//   "ddp"     DataParallel (parallel/ddp.h); FSDP NO_SHARD, ZeRO stage 0
//   "zero1"   ZeroStrategy (parallel/zero.h): AdamW state sharded
//   "zero2"   ShardedStrategy stage 2 (parallel/fsdp.h); FSDP SHARD_GRAD_OP
//   "zero3"   ShardedStrategy stage 3 with DeepSpeed's knobs (parallel.zero.*:
//             prefetch bucket, persistence threshold, overlap_comm)
//   "fsdp"    by parallel.fsdp.sharding_strategy: FULL_SHARD = stage 3,
//             SHARD_GRAD_OP = stage 2, NO_SHARD = ddp, HYBRID_SHARD = hybrid;
//             prefetch one unit ahead as backward_prefetch / forward_prefetch say
//   "hybrid"  stage 3 inside each node, replicated across nodes
//             (parallel.ranks_per_node, 0 = the ranks MPI puts on one node)
//
// parallel.offload_optimizer = "cpu" keeps the AdamW state (and the fp32
// master shard) in host memory for the sharded strategies; ddp refuses it.
//
//   std::unique_ptr<Strategy> strategy = make_strategy(config.parallel, *model, comm, adamw, node_size);
//   strategy->broadcast_parameters(0);
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "shardtrain/core/run_config.h"
#include "shardtrain/parallel/ddp.h"
#include "shardtrain/parallel/fsdp.h"
#include "shardtrain/parallel/strategy.h"
#include "shardtrain/parallel/zero.h"

namespace shardtrain {

// Every name parallel.strategy accepts.
std::vector<std::string> available_strategies();

// `node_size`: ranks per node as MPI reports them (hybrid with
// ranks_per_node = 0); <= 0 = all of comm. Throws Error naming the key for an
// unknown strategy or a combination that does not exist (offload with ddp).
std::unique_ptr<Strategy> make_strategy(const ParallelConfig& parallel, BertForSequenceClassification& model,
                                        Communicator& comm, const AdamWOptions& adamw, int node_size = 0);

// The strategy `name` with every other key at its default.
std::unique_ptr<Strategy> make_strategy(const std::string& name, BertForSequenceClassification& model,
                                        Communicator& comm, const AdamWOptions& adamw);

// The ShardOptions make_strategy() uses for a sharded configuration (stage 2
// or 3, hybrid); for logs, tests and benchmarks.
ShardOptions shard_options_for(const ParallelConfig& parallel, int world_size, int node_size);

// Lines for the job log: how the strategy reduces and gathers, and what the
// DeepSpeed / FSDP knobs that need no action here mean in this program (never
// silently ignored).
std::vector<std::string> strategy_notes(const ParallelConfig& parallel, int world_size, int node_size);

}  // namespace shardtrain
