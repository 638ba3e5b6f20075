#include "shardtrain/comm/communicator.h"

#include <c10/util/Exception.h>

#include <numeric>

#include "comm/collective_args.h"
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

void check_reducible(const at::Tensor& t, ReduceOp op, const char* operation) {
  TORCH_CHECK(op != ReduceOp::kAvg || at::isFloatingType(t.scalar_type()), operation,
              ": ReduceOp::kAvg needs a floating dtype, got ", t.scalar_type());
}

void check_even_split(const at::Tensor& input, const at::Tensor& output, int size, bool input_is_big,
                      const char* operation) {
  TORCH_CHECK(input.scalar_type() == output.scalar_type(), operation, ": input and output dtypes differ");
  const at::Tensor& big = input_is_big ? input : output;
  const at::Tensor& small = input_is_big ? output : input;
  TORCH_CHECK(big.numel() == small.numel() * size, operation, ": ", input_is_big ? "input" : "output", " has ",
              big.numel(), " elements, expected size() * ", input_is_big ? "output" : "input",
              ".numel() = ", small.numel() * size);
}

int64_t check_uneven_split(const at::Tensor& mine, const at::Tensor& whole, const std::vector<int64_t>& counts,
                           int rank, int size, const char* operation) {
  TORCH_CHECK(mine.scalar_type() == whole.scalar_type(), operation, ": input and output dtypes differ");
  TORCH_CHECK(static_cast<int>(counts.size()) == size, operation, ": ", counts.size(), " counts for ", size, " ranks");
  for (int64_t c : counts) TORCH_CHECK(c >= 0, operation, ": negative count ", c);
  TORCH_CHECK(mine.numel() == counts[static_cast<size_t>(rank)], operation, ": this rank's piece has ", mine.numel(),
              " elements but counts[", rank, "] = ", counts[static_cast<size_t>(rank)]);
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  TORCH_CHECK(whole.numel() == total, operation, ": the whole has ", whole.numel(), " elements, counts sum to ", total);
  return total;
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
