// MpiCommunicator: the Communicator for CPU tensors, over MPI non-blocking
// collectives (MPI_Iallreduce, MPI_Ireduce_scatter_block, MPI_Iallgather(v),
// MPI_Ibcast, MPI_Ibarrier).
//
// Dtypes: float64, float32, int64, int32, int16, int8, uint8, bool move and
// reduce natively. bfloat16 and float16 have no MPI reduction type: gathers and
// broadcasts move their raw 16-bit words, reductions run in a float32 copy and
// round back once at the end (so sums do not lose precision rank by rank).
// kAvg is a sum divided by size() and needs a floating dtype.
//
// Progress: Open MPI advances non-blocking collectives only inside MPI calls,
// so a strategy that overlaps communication should call test() on its
// outstanding Work from time to time (e.g. in each autograd hook).
// Work::wait() polls MPI_Test without pause when every rank on the node has a
// core of its own; when the node runs more ranks than cores (counted when
// communicators are built), a waiting rank spins briefly, then yields and
// sleeps between polls so the ranks that compute get the cores.
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>

#include "shardtrain/comm/communicator.h"

namespace shardtrain {

class ArrivalBoard;

class MpiCommunicator final : public Communicator {
 public:
  // Duplicates `comm` (the caller keeps ownership of its own handle).
  // timeout_s: a collective not complete after this long aborts the job.
  explicit MpiCommunicator(MPI_Comm comm, double timeout_s = 600.0);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  MPI_Comm comm() const { return comm_; }
  double timeout_s() const { return timeout_s_; }

  std::unique_ptr<Work> all_reduce_async(at::Tensor tensor, ReduceOp op) override;
  std::unique_ptr<Work> reduce_scatter_async(at::Tensor input, at::Tensor output, ReduceOp op) override;
  std::unique_ptr<Work> reduce_scatter_v_async(at::Tensor input, at::Tensor output, const std::vector<int64_t>& counts,
                                               ReduceOp op) override;
  std::unique_ptr<Work> all_gather_async(at::Tensor input, at::Tensor output) override;
  std::unique_ptr<Work> all_gather_v_async(at::Tensor input, at::Tensor output,
                                           const std::vector<int64_t>& counts) override;
  std::unique_ptr<Work> broadcast_async(at::Tensor tensor, int root) override;
  void barrier() override;
  std::unique_ptr<Communicator> split(int color, int key) override;

 private:
  struct Launch;
  std::unique_ptr<Work> start(const char* operation, Launch&& launch);
  // Both reduce-scatters: `call` launches the MPI collective from `send` into `receive`.
  std::unique_ptr<Work> start_reduce_scatter(const char* operation, const at::Tensor& input, const at::Tensor& output,
                                             ReduceOp op,
                                             std::function<int(const at::Tensor&, const at::Tensor&, MPI_Request*)> call);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  double timeout_s_;
  uint64_t sequence_ = 0;
  bool share_cores_ = false;  // more ranks than cores on a node: back off while waiting
  std::shared_ptr<ArrivalBoard> board_;
};

}  // namespace shardtrain
