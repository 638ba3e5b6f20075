// How the [parallel] config's DeepSpeed and FSDP knobs become the options of
// the sharded strategy (parallel/sharded.h), and what the knobs that need no
// action here mean (docs/DESIGN.md, "DeepSpeed and FSDP names").
//
//   zero2 / zero3 / hybrid (DeepSpeed semantics)
//     gradients reduce-scattered on every accumulation micro-step;
//     stage3_prefetch_bucket_size elements gathered ahead (forward and
//     backward); stage3_param_persistence_threshold keeps small parameters
//     replicated; reduce_bucket_size groups units' reduce-scatters;
//     overlap_comm off waits for every collective at once
//   fsdp (FSDP semantics, by sharding_strategy: FULL_SHARD stage 3,
//     SHARD_GRAD_OP stage 2, HYBRID_SHARD hybrid; NO_SHARD is ddp)
//     accumulation micro-steps keep full gradients (no_sync); prefetch one
//     unit ahead as backward_prefetch (BACKWARD_PRE / BACKWARD_POST /
//     NO_PREFETCH) and forward_prefetch say; collectives always overlap
//   hybrid
//     shard groups of Topology::shard_group_size ranks (one node), replicas
//     across the nodes
#pragma once
#include <string>
#include <vector>

#include "shardtrain/core/run_config.h"
#include "shardtrain/parallel/sharded.h"
#include "shardtrain/parallel/topology.h"

namespace shardtrain {

// The ShardOptions for a sharded configuration (topology.kind is zero2,
// zero3 or hybrid).
ShardOptions shard_options_for(const ParallelConfig& parallel, const Topology& topology);

// Lines for the job log: how the strategy reduces and gathers, and what the
// DeepSpeed / FSDP knobs that need no action here mean in this program (never
// silently ignored).
std::vector<std::string> strategy_notes(const ParallelConfig& parallel, const Topology& topology);

}  // namespace shardtrain
