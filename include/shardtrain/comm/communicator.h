// Communicator: collectives over torch tensors, the one interface every
// parallel strategy talks to.
//
//   MpiCommunicator  (comm/mpi_communicator.h)   CPU tensors, MPI collectives
//   NcclCommunicator (comm/nccl_communicator.h)  CUDA tensors, NCCL on its own stream
//
// Every collective has a non-blocking form (`*_async`) that returns a Work
// handle, so a strategy can launch gradient reductions from autograd hooks and
// overlap them with the rest of backward; the blocking form is `async(...)->wait()`.
// Tensors must be contiguous and must stay alive, untouched, until the Work
// completes. All ranks of the communicator must call the same collectives in
// the same order with matching sizes and dtypes.
//
// A collective that does not complete within the communicator's timeout aborts
// the job with a message naming the operation and the ranks that never arrived.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace shardtrain {

enum class ReduceOp { kSum, kAvg, kMax };

const char* reduce_op_name(ReduceOp op);

// Handle of a collective in flight.
class Work {
 public:
  virtual ~Work() = default;
  // Non-blocking completion check; also drives MPI progress.
  virtual bool test() = 0;
  // Blocks until complete (or aborts the job after the timeout). Results are
  // in the output tensors afterwards. Calling wait() twice is harmless.
  virtual void wait() = 0;
};

// Counters of what this rank put on the wire, for communication benchmarks.
struct CommStats {
  int64_t num_collectives = 0;
  int64_t bytes_sent = 0;  // by the ring algorithm's accounting, see bytes_on_wire()
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "mpi" or "nccl"

  // In place: every rank ends with op over all ranks' `tensor`.
  virtual std::unique_ptr<Work> all_reduce_async(at::Tensor tensor, ReduceOp op) = 0;
  // input has size() * output.numel() elements; rank r receives op over all
  // ranks of input's r-th chunk in `output`.
  virtual std::unique_ptr<Work> reduce_scatter_async(at::Tensor input, at::Tensor output, ReduceOp op) = 0;
  // Uneven reduce-scatter: input has sum(counts) elements; rank r receives op
  // over all ranks of input's r-th segment (counts[r] elements, segments in
  // rank order; a count may be 0) in `output` (counts[rank()] elements).
  virtual std::unique_ptr<Work> reduce_scatter_v_async(at::Tensor input, at::Tensor output,
                                                       const std::vector<int64_t>& counts, ReduceOp op) = 0;
  // output has size() * input.numel() elements: rank r's input lands in chunk r.
  virtual std::unique_ptr<Work> all_gather_async(at::Tensor input, at::Tensor output) = 0;
  // Uneven all-gather: rank r contributes counts[r] elements (input.numel() ==
  // counts[rank()]); output has sum(counts) elements, in rank order.
  virtual std::unique_ptr<Work> all_gather_v_async(at::Tensor input, at::Tensor output,
                                                   const std::vector<int64_t>& counts) = 0;
  // In place: every rank ends with root's `tensor`.
  virtual std::unique_ptr<Work> broadcast_async(at::Tensor tensor, int root) = 0;
  virtual void barrier() = 0;

  // New communicator over the ranks that pass the same `color`, ordered by
  // `key` (MPI_Comm_split semantics). Collective over this communicator.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  // Blocking forms.
  void all_reduce(at::Tensor tensor, ReduceOp op) { all_reduce_async(tensor, op)->wait(); }
  void reduce_scatter(at::Tensor input, at::Tensor output, ReduceOp op) {
    reduce_scatter_async(input, output, op)->wait();
  }
  void reduce_scatter_v(at::Tensor input, at::Tensor output, const std::vector<int64_t>& counts, ReduceOp op) {
    reduce_scatter_v_async(input, output, counts, op)->wait();
  }
  void all_gather(at::Tensor input, at::Tensor output) { all_gather_async(input, output)->wait(); }
  void all_gather_v(at::Tensor input, at::Tensor output, const std::vector<int64_t>& counts) {
    all_gather_v_async(input, output, counts)->wait();
  }
  void broadcast(at::Tensor tensor, int root) { broadcast_async(tensor, root)->wait(); }

  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_ = CommStats{}; }

 protected:
  CommStats stats_;
};

// Bytes one rank sends in a ring implementation of a collective over `size`
// ranks whose full (unsharded) buffer is `total_bytes`:
//   all_reduce 2 (n-1)/n S, reduce_scatter and all_gather (n-1)/n S, broadcast S (root).
enum class CollectiveKind { kAllReduce, kReduceScatter, kAllGather, kBroadcast };
int64_t bytes_on_wire(CollectiveKind kind, int64_t total_bytes, int size);

// Node-shaped groups for hierarchical strategies (hybrid sharding): blocks of
// `ranks_per_node` consecutive ranks form `intra` (rank i of the block is
// intra->rank() == i); `inter` joins the ranks with the same position in every
// block, ordered by block. Pass World::local_size() for the real nodes, or a
// smaller value to emulate several nodes on one machine. Collective over comm;
// ranks_per_node must divide comm.size() (shardtrain::Error otherwise).
struct NodeGroups {
  std::unique_ptr<Communicator> intra;
  std::unique_ptr<Communicator> inter;
};
NodeGroups split_into_nodes(Communicator& comm, int ranks_per_node);

}  // namespace shardtrain
