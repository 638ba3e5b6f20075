// Builds the Strategy a run config's [parallel] section names.
//
//   ddp     DataParallel (parallel/ddp.h); FSDP NO_SHARD, ZeRO stage 0
//   zero1   ZeroStrategy (parallel/zero1.h): AdamW state sharded
//   zero2   ShardedStrategy stage 2 (parallel/sharded.h); FSDP SHARD_GRAD_OP
//   zero3   ShardedStrategy stage 3 with DeepSpeed's knobs (parallel.zero.*:
//           prefetch bucket, persistence threshold, overlap_comm)
//   fsdp    by parallel.fsdp.sharding_strategy: FULL_SHARD = stage 3,
//           SHARD_GRAD_OP = stage 2, NO_SHARD = ddp, HYBRID_SHARD = hybrid;
//           FSDP's semantics (parallel/shard_policy.h)
//   hybrid  stage 3 inside each node, replicated across nodes
//           (parallel.ranks_per_node, 0 = the ranks MPI puts on one node)
//
// parallel.offload_optimizer = "cpu" keeps the AdamW state (and the fp32
// master shard) in host memory for the sharded strategies; ddp refuses it.
//
//   Topology topology = Topology::detect(comm.comm(), config.parallel);
//   std::unique_ptr<Strategy> strategy = make_strategy(config.parallel, topology, *model, comm, adamw);
//   strategy->broadcast_parameters(0);
#pragma once
#include <memory>

#include "shardtrain/core/run_config.h"
#include "shardtrain/parallel/ddp.h"
#include "shardtrain/parallel/shard_policy.h"
#include "shardtrain/parallel/sharded.h"
#include "shardtrain/parallel/strategy.h"
#include "shardtrain/parallel/topology.h"
#include "shardtrain/parallel/zero1.h"

namespace shardtrain {

// Throws Error naming the key for a combination that does not exist (offload
// with ddp). `comm` spans the job (topology.world_size ranks). `precision`:
// mixed_precision_for() of the run's config.
std::unique_ptr<Strategy> make_strategy(const ParallelConfig& parallel, const Topology& topology, UnitModel& model,
                                        Communicator& comm, const AdamWOptions& adamw,
                                        const MixedPrecision& precision = {});

// The dtypes a run trains in: train.mixed_precision's (bf16, fp16) for
// parameters and reductions alike (DeepSpeed, Accelerate), or with
// parallel.strategy = "fsdp" parallel.fsdp.param_dtype / reduce_dtype where
// they are not "auto" (FSDP's MixedPrecision).
MixedPrecision mixed_precision_for(Precision mixed_precision, const ParallelConfig& parallel);

// The same with all of comm's ranks taken as one node (tests and benchmarks;
// hybrid then needs parallel.ranks_per_node).
std::unique_ptr<Strategy> make_strategy(const ParallelConfig& parallel, UnitModel& model, Communicator& comm,
                                        const AdamWOptions& adamw);

}  // namespace shardtrain
