// Topology: where this rank sits in the job and in its strategy's groups,
// computed once (torchtitan's ParallelDims; docs/DESIGN.md, "Topology").
//
//   ranks     rank / world_size in the job's communicator
//   node      the ranks sharing this machine (MPI's shared-memory split):
//             local_rank (picks the GPU) and local_size; node_index of num_nodes
//   shards    the ranks that together hold one copy of the sharded state:
//             the whole job for zero1/2/3 and fsdp, one node's block of
//             ranks_per_node consecutive ranks for hybrid; ddp keeps a full
//             copy on every rank (a group of one). shard_rank is this rank's
//             place in its group, replica_index the group's place among the
//             num_replicas groups.
//
//   Topology topology = Topology::detect(comm, config.parallel);   // collective over comm
//   int gpu = topology.local_rank;
//
// detect() throws shardtrain::Error (the same on every rank) when hybrid's
// ranks per node do not divide the world size.
#pragma once

#include <mpi.h>

#include "shardtrain/core/run_config.h"

namespace shardtrain {

struct Topology {
  int rank = 0, world_size = 1;
  int local_rank = 0, local_size = 1;
  int node_index = 0, num_nodes = 1;
  int shard_group_size = 1, shard_rank = 0;
  int num_replicas = 1, replica_index = 0;

  // The strategy parallel.strategy names once FSDP's sharding_strategy is
  // resolved: kFsdp never comes out of it (FULL_SHARD -> kZero3 with FSDP's
  // knobs, see parallel/shard_policy.h; NO_SHARD -> kDdp; ...).
  StrategyKind kind = StrategyKind::kDdp;
  bool fsdp = false;  // parallel.strategy = "fsdp": FSDP's semantics (no_sync accumulation, prefetch one unit)

  bool hybrid() const { return kind == StrategyKind::kHybrid && shard_group_size < world_size; }
  // A LoRA run's frozen base is sharded (parallel/frozen_shards.h): the
  // strategy shards parameters (zero3, hybrid; fsdp's FULL_SHARD and
  // HYBRID_SHARD resolve to them) over more than one rank.
  bool shards_frozen_base() const {
    return (kind == StrategyKind::kZero3 || kind == StrategyKind::kHybrid) && shard_group_size > 1;
  }

  // Collective over comm.
  static Topology detect(MPI_Comm comm, const ParallelConfig& parallel);
  // Without MPI: `world_size` ranks on `ranks_per_node`-rank nodes, seen from
  // `rank` (for `shardtrain config --world-size N` and tests).
  static Topology assume(int rank, int world_size, int ranks_per_node, const ParallelConfig& parallel);
};

// The strategy a parallel config trains with (FSDP's sharding_strategy
// resolved; see Topology::kind).
StrategyKind effective_strategy(const ParallelConfig& parallel);

}  // namespace shardtrain
