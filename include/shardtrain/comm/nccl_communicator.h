// NcclCommunicator: the Communicator for CUDA tensors, over NCCL.
//
// Bootstrap (llm.c / PyTorch style): rank 0 of the MPI communicator creates an
// ncclUniqueId, MPI_Bcast hands it to every rank, and each rank calls
// ncclCommInitRank on its own GPU. NCCL needs one distinct GPU per rank of a
// communicator ("Duplicate GPU detected" otherwise), so start at most
// num_visible_devices() ranks per node and pick the GPU with
// device_for_local_rank(world.local_rank()).
//
// Streams: collectives run on the communicator's own non-blocking stream. Each
// one first waits (cudaStreamWaitEvent) for the work already queued on torch's
// current stream of the device, so it reads finished inputs; Work::wait()
// blocks the host until the collective is done and then makes torch's current
// stream wait for it, so later kernels see the result. Built against a CUDA
// LibTorch (SHARDTRAIN_TORCH_CUDA=1), "torch's current stream" is
// c10::cuda::getCurrentCUDAStream and the caching allocator is told the
// tensors are used on the NCCL stream (recordStream); built against a CPU
// LibTorch it is the legacy default stream.
//
// Dtypes: float32, float64, float16, bfloat16, int32, int64, uint8, int8.
// kAvg uses ncclAvg and needs a floating dtype (as MpiCommunicator does).
//
// Timeouts: Work::wait() polls the completion event and NCCL's asynchronous
// error state; past the timeout it aborts the NCCL communicator and the job,
// naming the ranks that never entered the collective (see ArrivalBoard).
//
// This header needs neither CUDA nor NCCL headers; the class exists in the
// library only when it was built with NCCL (SHARDTRAIN_HAVE_NCCL=1).
#pragma once

#include <mpi.h>

#include <memory>

#include "shardtrain/comm/communicator.h"

namespace shardtrain {

class ArrivalBoard;

class NcclCommunicator final : public Communicator {
 public:
  // CUDA devices this process can use; 0 when there is no device or no driver
  // (never fatal, so callers and tests can fall back or skip).
  static int num_visible_devices();
  // The GPU for the rank with this node-local rank: local_rank modulo the
  // visible devices. Throws Error when no device is visible.
  static int device_for_local_rank(int local_rank);

  // Collective over `comm` (duplicated; the caller keeps its handle). Makes
  // `device` the current CUDA device of the calling thread.
  // timeout_s: a collective not complete after this long aborts the job.
  NcclCommunicator(MPI_Comm comm, int device, double timeout_s = 600.0);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }
  int device() const { return device_; }
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
  // A one-element all_reduce on the NCCL stream, waited for.
  void barrier() override;
  // MPI_Comm_split of this communicator's ranks, then a new NcclCommunicator
  // on the same device.
  std::unique_ptr<Communicator> split(int color, int key) override;

  // The NCCL communicator, CUDA stream and barrier buffer (defined in the .cpp,
  // shared with Work handles that may outlive a call).
  struct Handles;

 private:
  struct Launch;
  std::unique_ptr<Work> start(const char* operation, const Launch& launch);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  int device_ = 0;
  double timeout_s_;
  uint64_t sequence_ = 0;
  std::shared_ptr<Handles> handles_;
  std::shared_ptr<ArrivalBoard> board_;
};

// Host <-> device copies for tests and benchmarks that work with either
// LibTorch: with a CUDA LibTorch they are Tensor::to(); with a CPU LibTorch the
// device tensor's memory comes from cudaMalloc (freed by cudaFree when the
// tensor dies) and the copy is a cudaMemcpy. Such a device tensor supports
// what NcclCommunicator needs (data_ptr, numel, dtype, device) but no torch ops.
at::Tensor copy_to_device(const at::Tensor& host, int device);
at::Tensor copy_to_host(const at::Tensor& device_tensor);

}  // namespace shardtrain
