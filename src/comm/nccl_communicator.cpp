#include "shardtrain/comm/nccl_communicator.h"

#include <ATen/ATen.h>

#include <chrono>
#include <functional>
#include <numeric>
#include <thread>

#include "comm/arrival_board.h"
#include "comm/collective_args.h"
#include "shardtrain/comm/watchdog.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/cuda_check.h"
#include "shardtrain/core/log.h"

#if SHARDTRAIN_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace shardtrain {
namespace {

// Makes `device` current for one scope; CUDA calls act on the current device,
// and the caller's choice is restored afterwards.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) : device_(device) {
    ST_CHECK_CUDA(cudaGetDevice(&previous_));
    if (previous_ != device_) ST_CHECK_CUDA(cudaSetDevice(device_));
  }
  ~DeviceGuard() {
    if (previous_ != device_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int device_;
  int previous_ = 0;
};

// The stream torch queues this device's kernels on. A CPU LibTorch queues
// nothing; code that touches device memory there (copy_to_device) uses the
// legacy default stream, so that is the stream to order against.
cudaStream_t torch_stream(int device) {
#if SHARDTRAIN_TORCH_CUDA
  return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
#else
  (void)device;
  return cudaStreamLegacy;
#endif
}

// The caching allocator must not hand `tensor`'s block to another tensor
// until the NCCL stream is done with it, even if the caller drops it early.
void record_stream(const at::Tensor& tensor, cudaStream_t stream, int device) {
#if SHARDTRAIN_TORCH_CUDA
  c10::cuda::CUDACachingAllocator::recordStream(
      tensor.storage().data_ptr(), c10::cuda::getStreamFromExternal(stream, static_cast<c10::DeviceIndex>(device)));
#else
  (void)tensor, (void)stream, (void)device;
#endif
}

ncclDataType_t nccl_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kHalf: return ncclFloat16;
    case at::kBFloat16: return ncclBfloat16;
    case at::kInt: return ncclInt32;
    case at::kLong: return ncclInt64;
    case at::kByte: return ncclUint8;
    case at::kChar: return ncclInt8;
    default: break;
  }
  throw Error(std::string("NcclCommunicator: unsupported dtype ") + c10::toString(t));
}

// On one rank an average is the input itself, and ncclSum (a copy) gives it.
// NCCL 2.28.9's one-rank ncclAvg (pip nvidia-nccl-cu13) leaves the last
// element of an out-of-place result unwritten for some counts (4097 floats,
// 4099 and 65537 doubles; seen on an H200, CUDA 13.0).
ncclRedOp_t nccl_op(ReduceOp op, int ranks) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ranks == 1 ? ncclSum : ncclAvg;
    case ReduceOp::kMax: return ncclMax;
  }
  return ncclSum;
}

void require_device_tensor(const at::Tensor& t, int device, const char* operation) {
  TORCH_CHECK(t.defined(), operation, ": tensor is undefined");
  TORCH_CHECK(t.is_cuda(), operation, ": NcclCommunicator takes CUDA tensors, got ", t.device());
  TORCH_CHECK(t.device().index() == device, operation, ": tensor is on ", t.device(),
              " but the communicator runs on cuda:", device);
  TORCH_CHECK(t.is_contiguous(), operation, ": tensor must be contiguous");
}


}  // namespace

struct NcclCommunicator::Handles {
  int device = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t inputs_ready = nullptr;  // recorded on torch's stream before each launch
  float* barrier_word = nullptr;       // what barrier() all-reduces
  bool aborted = false;

  Handles() = default;
  Handles(const Handles&) = delete;
  Handles& operator=(const Handles&) = delete;
  ~Handles() {
    // Unchecked: this may run while a fatal error unwinds.
    cudaSetDevice(device);
    if (comm != nullptr && !aborted) ncclCommDestroy(comm);
    if (barrier_word != nullptr) cudaFree(barrier_word);
    if (inputs_ready != nullptr) cudaEventDestroy(inputs_ready);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  // Kernels of a hung collective spin forever; abort releases them (and the GPU).
  void abort() {
    if (comm == nullptr || aborted) return;
    aborted = true;
    ncclCommAbort(comm);
  }
};

namespace {

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<NcclCommunicator::Handles> handles, std::shared_ptr<ArrivalBoard> board,
           uint64_t sequence, std::string operation, double timeout_s, std::vector<at::Tensor> tensors)
      : handles_(std::move(handles)), board_(std::move(board)), sequence_(sequence),
        operation_(std::move(operation)), timeout_s_(timeout_s), tensors_(std::move(tensors)) {
    ST_CHECK_CUDA(cudaEventCreateWithFlags(&done_event_, cudaEventDisableTiming));
    ST_CHECK_CUDA(cudaEventRecord(done_event_, handles_->stream));
  }

  ~NcclWork() override {
    // A Work dropped without wait() still has NCCL writing into its tensors.
    if (!done_) wait();
    cudaEventDestroy(done_event_);
  }

  bool test() override {
    if (done_) return true;
    const cudaError_t rc = cudaEventQuery(done_event_);
    if (rc == cudaErrorNotReady) return false;
    ST_CHECK_CUDA(rc);
    done_ = true;
    tensors_.clear();
    return true;
  }

  void wait() override {
    using Clock = std::chrono::steady_clock;
    const auto deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
    // Same back-off as MpiWork::wait: spin for short collectives, then yield
    // and sleep so ranks sharing cores do not starve each other.
    for (int64_t i = 0; !test(); ++i) {
      if (i < 200) continue;
      if ((i & 15) == 0) {
        check_async_error();
        if (Clock::now() > deadline) {
          handles_->abort();
          board_->abort_on_timeout(sequence_, operation_, timeout_s_, __FILE__, __LINE__);
        }
      }
      if (i < 2000)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(i < 20000 ? 20 : 200));
    }
    // The host knows the result is there; kernels queued later on torch's
    // stream must know it too (and keep knowing it under stream capture).
    DeviceGuard guard(handles_->device);
    ST_CHECK_CUDA(cudaStreamWaitEvent(torch_stream(handles_->device), done_event_, 0));
  }

 private:
  // A peer that died or a network failure surfaces here, not in the event.
  void check_async_error() {
    ncclResult_t async_error = ncclSuccess;
    ST_CHECK_NCCL(ncclCommGetAsyncError(handles_->comm, &async_error));
    if (async_error == ncclSuccess || async_error == ncclInProgress) return;
    const std::string detail = ncclGetLastError(handles_->comm);
    handles_->abort();
    fatal("NCCL", __FILE__, __LINE__,
          str_format("%s (asynchronous error in %s, collective #%llu)%s%s", ncclGetErrorString(async_error),
                     operation_.c_str(), static_cast<unsigned long long>(sequence_), detail.empty() ? "" : ": ",
                     detail.c_str()));
  }

  std::shared_ptr<NcclCommunicator::Handles> handles_;
  std::shared_ptr<ArrivalBoard> board_;
  uint64_t sequence_;
  std::string operation_;
  double timeout_s_;
  std::vector<at::Tensor> tensors_;  // kept alive until the collective completes
  cudaEvent_t done_event_ = nullptr;
  bool done_ = false;
};

}  // namespace

// What start() needs to launch one collective: the NCCL call(s) to enqueue,
// the tensors they touch, and the bytes for the stats.
struct NcclCommunicator::Launch {
  std::function<void(ncclComm_t, cudaStream_t)> enqueue;
  std::vector<at::Tensor> tensors;
  CollectiveKind kind = CollectiveKind::kAllReduce;
  int64_t total_bytes = 0;
};

int NcclCommunicator::num_visible_devices() {
  int count = 0;
  // No driver or no device is an answer (0), not an error.
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear it so the next CUDA call does not report it
    return 0;
  }
  return count;
}

int NcclCommunicator::device_for_local_rank(int local_rank) {
  const int count = num_visible_devices();
  if (count == 0)
    throw Error("no CUDA device is visible to this process (check CUDA_VISIBLE_DEVICES and the driver), "
                "so the NCCL backend cannot run; use --device cpu");
  return local_rank % count;
}

NcclCommunicator::NcclCommunicator(MPI_Comm comm, int device, double timeout_s)
    : device_(device), timeout_s_(timeout_s) {
  // Covers the MPI set-up, the broadcast of the NCCL id and ncclCommInitRank.
  PhaseGuard guard(comm, "NcclCommunicator set-up", timeout_s);
  ST_CHECK_MPI(MPI_Comm_dup(comm, &comm_));
  ST_CHECK_MPI(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  ST_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
  ST_CHECK_MPI(MPI_Comm_size(comm_, &size_));
  board_ = std::make_shared<ArrivalBoard>(comm_);

  ST_CHECK_CUDA(cudaSetDevice(device_));
  handles_ = std::make_shared<Handles>();
  handles_->device = device_;
  ST_CHECK_CUDA(cudaStreamCreateWithFlags(&handles_->stream, cudaStreamNonBlocking));
  ST_CHECK_CUDA(cudaEventCreateWithFlags(&handles_->inputs_ready, cudaEventDisableTiming));
  ST_CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&handles_->barrier_word), sizeof(float)));
  ST_CHECK_CUDA(cudaMemset(handles_->barrier_word, 0, sizeof(float)));

  ncclUniqueId id{};
  if (rank_ == 0) ST_CHECK_NCCL(ncclGetUniqueId(&id));
  ST_CHECK_MPI(MPI_Bcast(&id, static_cast<int>(sizeof(id)), MPI_BYTE, 0, comm_));
  ST_CHECK_NCCL(ncclCommInitRank(&handles_->comm, size_, id, rank_));
}

NcclCommunicator::~NcclCommunicator() {
  handles_.reset();  // outstanding Work keeps its own reference
  board_.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  // A destructor must not throw (that would std::terminate mid-unwind): warn.
  if (comm_ != MPI_COMM_NULL && !finalized && MPI_Comm_free(&comm_) != MPI_SUCCESS)
    log_warn("MPI_Comm_free failed while shutting down a communicator");
}

std::unique_ptr<Work> NcclCommunicator::start(const char* operation, const Launch& launch) {
  DeviceGuard guard(device_);
  ++sequence_;
  board_->enter(sequence_, operation);
  ++stats_.num_collectives;
  stats_.bytes_sent += bytes_on_wire(launch.kind, launch.total_bytes, size_);
  for (const auto& tensor : launch.tensors) record_stream(tensor, handles_->stream, device_);
  // Inputs may still be being written by kernels on torch's stream: the NCCL
  // stream waits for them on the GPU, the host does not block.
  ST_CHECK_CUDA(cudaEventRecord(handles_->inputs_ready, torch_stream(device_)));
  ST_CHECK_CUDA(cudaStreamWaitEvent(handles_->stream, handles_->inputs_ready, 0));
  launch.enqueue(handles_->comm, handles_->stream);
  return std::make_unique<NcclWork>(handles_, board_, sequence_, operation, timeout_s_, launch.tensors);
}

// Collectives of zero elements are skipped on every rank alike (the sizes
// match across ranks), so they still complete and count in the sequence.

std::unique_ptr<Work> NcclCommunicator::all_reduce_async(at::Tensor tensor, ReduceOp op) {
  require_device_tensor(tensor, device_, "all_reduce");
  check_reducible(tensor, op, "all_reduce");
  const ncclDataType_t type = nccl_type(tensor.scalar_type());
  const size_t count = static_cast<size_t>(tensor.numel());
  void* data = tensor.data_ptr();
  const ncclRedOp_t red = nccl_op(op, size_);
  Launch launch;
  launch.kind = CollectiveKind::kAllReduce;
  launch.total_bytes = tensor.numel() * tensor.element_size();
  launch.tensors = {tensor};
  launch.enqueue = [=](ncclComm_t comm, cudaStream_t stream) {
    if (count > 0) ST_CHECK_NCCL(ncclAllReduce(data, data, count, type, red, comm, stream));
  };
  return start("all_reduce", launch);
}

std::unique_ptr<Work> NcclCommunicator::reduce_scatter_async(at::Tensor input, at::Tensor output, ReduceOp op) {
  require_device_tensor(input, device_, "reduce_scatter");
  require_device_tensor(output, device_, "reduce_scatter");
  check_reducible(input, op, "reduce_scatter");
  check_even_split(input, output, size_, /*input_is_big=*/true, "reduce_scatter");
  const ncclDataType_t type = nccl_type(input.scalar_type());
  const size_t count = static_cast<size_t>(output.numel());  // per rank
  const void* send = input.data_ptr();
  void* receive = output.data_ptr();
  const ncclRedOp_t red = nccl_op(op, size_);
  Launch launch;
  launch.kind = CollectiveKind::kReduceScatter;
  launch.total_bytes = input.numel() * input.element_size();
  launch.tensors = {input, output};
  launch.enqueue = [=](ncclComm_t comm, cudaStream_t stream) {
    if (count > 0) ST_CHECK_NCCL(ncclReduceScatter(send, receive, count, type, red, comm, stream));
  };
  return start("reduce_scatter", launch);
}

std::unique_ptr<Work> NcclCommunicator::reduce_scatter_v_async(at::Tensor input, at::Tensor output,
                                                               const std::vector<int64_t>& counts, ReduceOp op) {
  require_device_tensor(input, device_, "reduce_scatter_v");
  require_device_tensor(output, device_, "reduce_scatter_v");
  check_reducible(input, op, "reduce_scatter_v");
  check_uneven_split(output, input, counts, rank_, size_, "reduce_scatter_v");
  const ncclDataType_t type = nccl_type(input.scalar_type());
  const size_t element_size = static_cast<size_t>(input.element_size());
  const char* send = static_cast<const char*>(input.data_ptr());
  void* receive = output.data_ptr();
  const ncclRedOp_t red = nccl_op(op, size_);
  const int me = rank_;
  Launch launch;
  launch.kind = CollectiveKind::kReduceScatter;
  launch.total_bytes = input.numel() * input.element_size();
  launch.tensors = {input, output};
  // NCCL has no reduce-scatter-v: one reduce per rank onto that rank's
  // segment, fused into one launch by the group.
  launch.enqueue = [=](ncclComm_t comm, cudaStream_t stream) {
    ST_CHECK_NCCL(ncclGroupStart());
    size_t offset = 0;
    for (int q = 0; q < static_cast<int>(counts.size()); ++q) {
      const size_t count = static_cast<size_t>(counts[static_cast<size_t>(q)]);
      // Only the root's receive buffer is written.
      if (count > 0)
        ST_CHECK_NCCL(ncclReduce(send + offset * element_size, q == me ? receive : nullptr, count, type, red, q, comm,
                                 stream));
      offset += count;
    }
    ST_CHECK_NCCL(ncclGroupEnd());
  };
  return start("reduce_scatter_v", launch);
}

std::unique_ptr<Work> NcclCommunicator::all_gather_async(at::Tensor input, at::Tensor output) {
  require_device_tensor(input, device_, "all_gather");
  require_device_tensor(output, device_, "all_gather");
  check_even_split(input, output, size_, /*input_is_big=*/false, "all_gather");
  const ncclDataType_t type = nccl_type(input.scalar_type());
  const size_t count = static_cast<size_t>(input.numel());  // per rank
  const void* send = input.data_ptr();
  void* receive = output.data_ptr();
  Launch launch;
  launch.kind = CollectiveKind::kAllGather;
  launch.total_bytes = output.numel() * output.element_size();
  launch.tensors = {input, output};
  launch.enqueue = [=](ncclComm_t comm, cudaStream_t stream) {
    if (count > 0) ST_CHECK_NCCL(ncclAllGather(send, receive, count, type, comm, stream));
  };
  return start("all_gather", launch);
}

std::unique_ptr<Work> NcclCommunicator::all_gather_v_async(at::Tensor input, at::Tensor output,
                                                           const std::vector<int64_t>& counts) {
  require_device_tensor(input, device_, "all_gather_v");
  require_device_tensor(output, device_, "all_gather_v");
  const int64_t total = check_uneven_split(input, output, counts, rank_, size_, "all_gather_v");
  const ncclDataType_t type = nccl_type(input.scalar_type());
  const size_t element_size = static_cast<size_t>(output.element_size());
  const void* send = input.data_ptr();
  char* receive = static_cast<char*>(output.data_ptr());
  const int me = rank_;
  Launch launch;
  launch.kind = CollectiveKind::kAllGather;
  launch.total_bytes = total * output.element_size();
  launch.tensors = {input, output};
  // NCCL has no all-gather-v: as PyTorch does, one broadcast per rank into
  // that rank's slice, fused into one launch by the group.
  launch.enqueue = [=](ncclComm_t comm, cudaStream_t stream) {
    ST_CHECK_NCCL(ncclGroupStart());
    size_t offset = 0;
    for (int q = 0; q < static_cast<int>(counts.size()); ++q) {
      const size_t count = static_cast<size_t>(counts[static_cast<size_t>(q)]);
      void* slice = receive + offset * element_size;
      // Only the root's send buffer is read.
      if (count > 0) ST_CHECK_NCCL(ncclBroadcast(q == me ? send : slice, slice, count, type, q, comm, stream));
      offset += count;
    }
    ST_CHECK_NCCL(ncclGroupEnd());
  };
  return start("all_gather_v", launch);
}

std::unique_ptr<Work> NcclCommunicator::broadcast_async(at::Tensor tensor, int root) {
  require_device_tensor(tensor, device_, "broadcast");
  TORCH_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " outside [0, ", size_, ")");
  const ncclDataType_t type = nccl_type(tensor.scalar_type());
  const size_t count = static_cast<size_t>(tensor.numel());
  void* data = tensor.data_ptr();
  Launch launch;
  launch.kind = CollectiveKind::kBroadcast;
  launch.total_bytes = rank_ == root ? tensor.numel() * tensor.element_size() : 0;
  launch.tensors = {tensor};
  launch.enqueue = [=](ncclComm_t comm, cudaStream_t stream) {
    if (count > 0) ST_CHECK_NCCL(ncclBroadcast(data, data, count, type, root, comm, stream));
  };
  return start("broadcast", launch);
}

void NcclCommunicator::barrier() {
  float* word = handles_->barrier_word;
  Launch launch;
  launch.kind = CollectiveKind::kBroadcast;
  launch.total_bytes = 0;
  launch.enqueue = [word](ncclComm_t comm, cudaStream_t stream) {
    ST_CHECK_NCCL(ncclAllReduce(word, word, 1, ncclFloat32, ncclSum, comm, stream));
  };
  start("barrier", launch)->wait();
}

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key) {
  PhaseGuard guard(comm_, "NcclCommunicator::split", timeout_s_);
  MPI_Comm sub = MPI_COMM_NULL;
  ST_CHECK_MPI(MPI_Comm_split(comm_, color, key, &sub));
  auto out = std::make_unique<NcclCommunicator>(sub, device_, timeout_s_);
  ST_CHECK_MPI(MPI_Comm_free(&sub));
  return out;
}

at::Tensor copy_to_device(const at::Tensor& host, int device) {
  TORCH_CHECK(host.device().is_cpu(), "copy_to_device: expected a CPU tensor, got ", host.device());
#if SHARDTRAIN_TORCH_CUDA
  return host.to(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device))).contiguous();
#else
  const at::Tensor source = host.contiguous();
  const size_t bytes = static_cast<size_t>(source.numel() * source.element_size());
  DeviceGuard guard(device);
  void* data = nullptr;
  if (bytes > 0) {
    ST_CHECK_CUDA(cudaMalloc(&data, bytes));
    ST_CHECK_CUDA(cudaMemcpy(data, source.data_ptr(), bytes, cudaMemcpyHostToDevice));
  }
  const at::Device target(at::kCUDA, static_cast<c10::DeviceIndex>(device));
  // target_device: a CPU LibTorch cannot ask CUDA which device owns a pointer.
  return at::for_blob(data, source.sizes())
      .deleter([](void* p) {
        if (p != nullptr) cudaFree(p);
      })
      .options(source.options().device(target))
      .target_device(target)
      .make_tensor();
#endif
}

at::Tensor copy_to_host(const at::Tensor& device_tensor) {
  TORCH_CHECK(device_tensor.is_cuda(), "copy_to_host: expected a CUDA tensor, got ", device_tensor.device());
#if SHARDTRAIN_TORCH_CUDA
  return device_tensor.to(at::kCPU);
#else
  TORCH_CHECK(device_tensor.is_contiguous(), "copy_to_host: tensor must be contiguous");
  at::Tensor out = at::empty(device_tensor.sizes(), device_tensor.options().device(at::kCPU));
  const size_t bytes = static_cast<size_t>(out.numel() * out.element_size());
  if (bytes > 0) {
    DeviceGuard guard(device_tensor.device().index());
    // On the legacy default stream: ordered after Work::wait()'s stream wait.
    ST_CHECK_CUDA(cudaMemcpy(out.data_ptr(), device_tensor.data_ptr(), bytes, cudaMemcpyDeviceToHost));
  }
  return out;
#endif
}

}  // namespace shardtrain
