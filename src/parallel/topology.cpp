#include "shardtrain/parallel/topology.h"

#include "shardtrain/comm/watchdog.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain {

StrategyKind effective_strategy(const ParallelConfig& parallel) {
  if (parallel.strategy != StrategyKind::kFsdp) return parallel.strategy;
  switch (parallel.fsdp.sharding_strategy) {
    case FsdpShardingStrategy::kFullShard: return StrategyKind::kZero3;
    case FsdpShardingStrategy::kShardGradOp: return StrategyKind::kZero2;
    case FsdpShardingStrategy::kNoShard: return StrategyKind::kDdp;
    case FsdpShardingStrategy::kHybridShard: return StrategyKind::kHybrid;
  }
  return StrategyKind::kZero3;
}

Topology Topology::assume(int rank, int world_size, int ranks_per_node, const ParallelConfig& parallel) {
  ST_ASSERT(world_size >= 1 && rank >= 0 && rank < world_size && ranks_per_node >= 1, "Topology::assume: bad shape");
  Topology t;
  t.rank = rank;
  t.world_size = world_size;
  t.local_size = ranks_per_node;
  t.local_rank = rank % ranks_per_node;
  t.node_index = rank / ranks_per_node;
  t.num_nodes = (world_size + ranks_per_node - 1) / ranks_per_node;
  t.kind = effective_strategy(parallel);
  t.fsdp = parallel.strategy == StrategyKind::kFsdp;
  switch (t.kind) {
    case StrategyKind::kDdp: t.shard_group_size = 1; break;
    case StrategyKind::kHybrid: {
      const int n = parallel.ranks_per_node > 0 ? static_cast<int>(parallel.ranks_per_node) : ranks_per_node;
      if (world_size % n != 0)
        throw Error(str_format("parallel.strategy = \"hybrid\": %d ranks per node does not divide the %d ranks; set "
                               "parallel.ranks_per_node to a divisor of the world size",
                               n, world_size));
      t.shard_group_size = n;
      break;
    }
    default: t.shard_group_size = world_size; break;
  }
  t.shard_rank = rank % t.shard_group_size;
  t.num_replicas = world_size / t.shard_group_size;
  t.replica_index = rank / t.shard_group_size;
  return t;
}

Topology Topology::detect(MPI_Comm comm, const ParallelConfig& parallel) {
  int rank = 0, world = 1;
  ST_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  ST_CHECK_MPI(MPI_Comm_size(comm, &world));
  PhaseGuard guard(comm, "finding the ranks of each node (Topology::detect)");
  MPI_Comm node = MPI_COMM_NULL;
  ST_CHECK_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
  int local_rank = 0, local_size = 1;
  ST_CHECK_MPI(MPI_Comm_rank(node, &local_rank));
  ST_CHECK_MPI(MPI_Comm_size(node, &local_size));
  // Node index: rank among the first ranks of each node, shared with the node.
  MPI_Comm leaders = MPI_COMM_NULL;
  ST_CHECK_MPI(MPI_Comm_split(comm, local_rank == 0 ? 0 : MPI_UNDEFINED, rank, &leaders));
  int layout[2] = {0, 1};
  if (leaders != MPI_COMM_NULL) {
    ST_CHECK_MPI(MPI_Comm_rank(leaders, &layout[0]));
    ST_CHECK_MPI(MPI_Comm_size(leaders, &layout[1]));
    ST_CHECK_MPI(MPI_Comm_free(&leaders));
  }
  ST_CHECK_MPI(MPI_Bcast(layout, 2, MPI_INT, 0, node));
  ST_CHECK_MPI(MPI_Comm_free(&node));
  // Blocks of local_size consecutive ranks stand for nodes in assume(); the
  // real placement may differ (round-robin mapping), so keep what MPI says.
  Topology t = assume(rank, world, local_size, parallel);
  t.local_rank = local_rank;
  t.local_size = local_size;
  t.node_index = layout[0];
  t.num_nodes = layout[1];
  return t;
}

}  // namespace shardtrain
