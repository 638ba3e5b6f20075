#include "shardtrain/comm/communicator.h"

#include "shardtrain/core/check.h"

namespace shardtrain {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
  }
  return "?";
}

int64_t bytes_on_wire(CollectiveKind kind, int64_t total_bytes, int size) {
  if (size <= 1) return 0;
  const int64_t share = total_bytes * (size - 1) / size;
  switch (kind) {
    case CollectiveKind::kAllReduce: return 2 * share;
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllGather: return share;
    case CollectiveKind::kBroadcast: return total_bytes;
  }
  return 0;
}

NodeGroups split_into_nodes(Communicator& comm, int ranks_per_node) {
  if (ranks_per_node <= 0 || comm.size() % ranks_per_node != 0)
    throw Error("ranks per node = " + std::to_string(ranks_per_node) + " must divide the " +
                std::to_string(comm.size()) + " ranks of the job (parallel.ranks_per_node)");
  const int rank = comm.rank();
  NodeGroups groups;
  groups.intra = comm.split(rank / ranks_per_node, rank);
  groups.inter = comm.split(rank % ranks_per_node, rank / ranks_per_node);
  return groups;
}

}  // namespace shardtrain
