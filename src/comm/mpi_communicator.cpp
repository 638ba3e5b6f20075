#include "shardtrain/comm/mpi_communicator.h"

#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <functional>
#include <cmath>
#include <mutex>
#include <numeric>
#include <thread>

#include "comm/arrival_board.h"
#include "comm/collective_args.h"
#include "shardtrain/comm/watchdog.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain {
namespace {

// Serialises MPI calls when the library did not grant MPI_THREAD_MULTIPLE.
std::mutex& mpi_mutex() {
  static std::mutex mutex;
  return mutex;
}
bool mpi_thread_multiple() {
  static const bool multiple = [] {
    int provided = MPI_THREAD_SINGLE;
    ST_CHECK_MPI(MPI_Query_thread(&provided));
    return provided >= MPI_THREAD_MULTIPLE;
  }();
  return multiple;
}
template <class F>
auto with_mpi(F&& f) {
  if (mpi_thread_multiple()) return f();
  std::lock_guard<std::mutex> lock(mpi_mutex());
  return f();
}

// The most ranks of one communicator seen on one node by this process (the
// world's, as the world communicator is built first), against the node's
// cores: more ranks than cores (mpirun --oversubscribe, CI) means ranks that
// wait for a collective must leave the cores to ranks that compute.
int& most_ranks_on_node() {
  static int most = 0;
  return most;
}
bool ranks_share_cores() {
  const unsigned cores = std::thread::hardware_concurrency();
  return cores > 0 && most_ranks_on_node() > static_cast<int>(cores);
}


// The MPI type that moves (and, for non-16-bit floats, reduces) elements of `t`.
MPI_Datatype mpi_type(at::ScalarType t) {
  switch (t) {
    case at::kDouble: return MPI_DOUBLE;
    case at::kFloat: return MPI_FLOAT;
    case at::kLong: return MPI_INT64_T;
    case at::kInt: return MPI_INT32_T;
    case at::kShort: return MPI_INT16_T;
    case at::kChar: return MPI_INT8_T;
    case at::kByte: return MPI_UINT8_T;
    case at::kBool: return MPI_C_BOOL;
    case at::kBFloat16:
    case at::kHalf: return MPI_UINT16_T;  // raw words; reductions by the ops of mpi_op()
    default: break;
  }
  throw Error(std::string("MpiCommunicator: unsupported dtype ") + c10::toString(t));
}

// 16-bit floats travel as 16-bit words and are reduced by user-defined ops:
// each pair of elements is added (or compared) in float32 and rounded back to
// nearest-even, as NCCL reduces bf16 / fp16, so a reduction moves half the
// bytes of a float32 one.
template <class T, bool kMax>
void reduce_16bit(void* in, void* inout, int* length, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *length; ++i) {
    const float x = static_cast<float>(a[i]), y = static_cast<float>(b[i]);
    b[i] = static_cast<T>(kMax ? (x > y || std::isnan(x) ? x : y) : x + y);
  }
}

MPI_Op make_op(MPI_User_function* function) {
  MPI_Op op = MPI_OP_NULL;
  ST_CHECK_MPI(MPI_Op_create(function, /*commute=*/1, &op));
  return op;
}

MPI_Op mpi_op(ReduceOp op, at::ScalarType t) {
  const bool max = op == ReduceOp::kMax;
  if (t == at::kBFloat16) {
    static const MPI_Op sum_op = make_op(&reduce_16bit<c10::BFloat16, false>);
    static const MPI_Op max_op = make_op(&reduce_16bit<c10::BFloat16, true>);
    return max ? max_op : sum_op;
  }
  if (t == at::kHalf) {
    static const MPI_Op sum_op = make_op(&reduce_16bit<c10::Half, false>);
    static const MPI_Op max_op = make_op(&reduce_16bit<c10::Half, true>);
    return max ? max_op : sum_op;
  }
  return max ? MPI_MAX : MPI_SUM;
}

int to_int_count(int64_t count, const char* what) {
  if (count < 0 || count > INT_MAX)
    throw Error(str_format("MpiCommunicator: %s of %lld elements exceeds MPI's int count limit", what,
                           static_cast<long long>(count)));
  return static_cast<int>(count);
}

void require_cpu_contiguous(const at::Tensor& t, const char* operation) {
  TORCH_CHECK(t.defined(), operation, ": tensor is undefined");
  TORCH_CHECK(t.device().is_cpu(), operation, ": MpiCommunicator takes CPU tensors, got ", t.device());
  TORCH_CHECK(t.is_contiguous(), operation, ": tensor must be contiguous");
}


class MpiWork final : public Work {
 public:
  MpiWork(MPI_Request request, std::function<void()> finish, std::shared_ptr<ArrivalBoard> board,
          uint64_t sequence, std::string operation, double timeout_s, bool share_cores)
      : request_(request), finish_(std::move(finish)), board_(std::move(board)), sequence_(sequence),
        operation_(std::move(operation)), timeout_s_(timeout_s), share_cores_(share_cores) {}

  ~MpiWork() override {
    // A Work dropped without wait() still owns buffers MPI is writing into.
    if (!done_) wait();
  }

  bool test() override {
    if (done_) return true;
    int flag = 0;
    ST_CHECK_MPI(with_mpi([&] { return MPI_Test(&request_, &flag, MPI_STATUS_IGNORE); }));
    if (flag) complete();
    return done_;
  }

  void wait() override {
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
    // Every MPI_Test moves a few fragments of a large message (Open MPI's
    // shared-memory transport copies through fixed-size fragments when
    // single-copy is unavailable, as in containers): a rank with a core of
    // its own polls without pause, as MPI_Wait does. Ranks that share cores
    // (oversubscribed nodes, CI) spin briefly, then back off so they do not
    // starve the ranks that compute.
    for (int64_t i = 0; !test(); ++i) {
      if (i < 200) continue;
      if ((i & 15) == 0 && Clock::now() > deadline)
        board_->abort_on_timeout(sequence_, operation_, timeout_s_, __FILE__, __LINE__);
      if (!share_cores_) continue;
      if (i < 2000)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(i < 20000 ? 20 : 200));
    }
  }

 private:
  void complete() {
    done_ = true;
    if (finish_) finish_();
    finish_ = nullptr;
  }

  MPI_Request request_;
  std::function<void()> finish_;
  std::shared_ptr<ArrivalBoard> board_;
  uint64_t sequence_;
  std::string operation_;
  double timeout_s_;
  bool share_cores_;
  bool done_ = false;
};

}  // namespace

// What start() needs to launch one collective: the MPI call, and what to do
// with the result once it is complete.
struct MpiCommunicator::Launch {
  std::function<int(MPI_Request*)> call;
  std::function<void()> finish;
  CollectiveKind kind;
  int64_t total_bytes;
};

MpiCommunicator::MpiCommunicator(MPI_Comm comm, double timeout_s) : timeout_s_(timeout_s) {
  PhaseGuard guard(comm, "MpiCommunicator set-up", timeout_s);
  ST_CHECK_MPI(MPI_Comm_dup(comm, &comm_));
  ST_CHECK_MPI(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  ST_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
  ST_CHECK_MPI(MPI_Comm_size(comm_, &size_));
  board_ = std::make_shared<ArrivalBoard>(comm_);
  MPI_Comm node = MPI_COMM_NULL;
  ST_CHECK_MPI(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
  int on_node = 1;
  ST_CHECK_MPI(MPI_Comm_size(node, &on_node));
  ST_CHECK_MPI(MPI_Comm_free(&node));
  most_ranks_on_node() = std::max(most_ranks_on_node(), on_node);
  share_cores_ = ranks_share_cores();
}

MpiCommunicator::~MpiCommunicator() {
  board_.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  // A destructor must not throw (that would std::terminate mid-unwind): warn.
  if (comm_ != MPI_COMM_NULL && !finalized && MPI_Comm_free(&comm_) != MPI_SUCCESS)
    log_warn("MPI_Comm_free failed while shutting down a communicator");
}

std::unique_ptr<Work> MpiCommunicator::start(const char* operation, Launch&& launch) {
  ++sequence_;
  board_->enter(sequence_, operation);
  ++stats_.num_collectives;
  stats_.bytes_sent += bytes_on_wire(launch.kind, launch.total_bytes, size_);
  MPI_Request request = MPI_REQUEST_NULL;
  ST_CHECK_MPI(with_mpi([&] { return launch.call(&request); }));
  return std::make_unique<MpiWork>(request, std::move(launch.finish), board_, sequence_, operation, timeout_s_,
                                   share_cores_);
}

std::unique_ptr<Work> MpiCommunicator::all_reduce_async(at::Tensor tensor, ReduceOp op) {
  require_cpu_contiguous(tensor, "all_reduce");
  check_reducible(tensor, op, "all_reduce");
  const int count = to_int_count(tensor.numel(), "all_reduce");
  const double divisor = op == ReduceOp::kAvg ? static_cast<double>(size_) : 1.0;
  Launch launch;
  launch.kind = CollectiveKind::kAllReduce;
  launch.total_bytes = tensor.numel() * tensor.element_size();
  MPI_Comm comm = comm_;
  launch.call = [tensor, count, op, comm](MPI_Request* request) {
    return MPI_Iallreduce(MPI_IN_PLACE, tensor.data_ptr(), count, mpi_type(tensor.scalar_type()),
                          mpi_op(op, tensor.scalar_type()), comm, request);
  };
  launch.finish = [tensor, divisor]() mutable {
    if (divisor != 1.0) tensor.div_(divisor);
  };
  return start("all_reduce", std::move(launch));
}

std::unique_ptr<Work> MpiCommunicator::reduce_scatter_async(at::Tensor input, at::Tensor output, ReduceOp op) {
  require_cpu_contiguous(input, "reduce_scatter");
  require_cpu_contiguous(output, "reduce_scatter");
  check_reducible(input, op, "reduce_scatter");
  check_even_split(input, output, size_, /*input_is_big=*/true, "reduce_scatter");
  const int count = to_int_count(output.numel(), "reduce_scatter");
  to_int_count(input.numel(), "reduce_scatter");
  MPI_Comm comm = comm_;
  return start_reduce_scatter("reduce_scatter", input, output, op,
                              [count, op, comm](const at::Tensor& send, const at::Tensor& receive, MPI_Request* request) {
                                const at::ScalarType t = send.scalar_type();
                                return MPI_Ireduce_scatter_block(send.data_ptr(), receive.data_ptr(), count,
                                                                 mpi_type(t), mpi_op(op, t), comm, request);
                              });
}

// The average divides after the sum (in the tensor's dtype).
std::unique_ptr<Work> MpiCommunicator::start_reduce_scatter(
    const char* operation, const at::Tensor& input, const at::Tensor& output, ReduceOp op,
    std::function<int(const at::Tensor&, const at::Tensor&, MPI_Request*)> call) {
  const double divisor = op == ReduceOp::kAvg ? static_cast<double>(size_) : 1.0;
  Launch launch;
  launch.kind = CollectiveKind::kReduceScatter;
  launch.total_bytes = input.numel() * input.element_size();
  launch.call = [input, output, call](MPI_Request* request) { return call(input, output, request); };
  // `input` is captured so it outlives the collective (MPI reads it until completion).
  launch.finish = [input, output, divisor]() mutable {
    if (divisor != 1.0) output.div_(divisor);
  };
  return start(operation, std::move(launch));
}

std::unique_ptr<Work> MpiCommunicator::reduce_scatter_v_async(at::Tensor input, at::Tensor output,
                                                              const std::vector<int64_t>& counts, ReduceOp op) {
  require_cpu_contiguous(input, "reduce_scatter_v");
  require_cpu_contiguous(output, "reduce_scatter_v");
  check_reducible(input, op, "reduce_scatter_v");
  to_int_count(check_uneven_split(output, input, counts, rank_, size_, "reduce_scatter_v"), "reduce_scatter_v");
  auto receive_counts = std::make_shared<std::vector<int>>(counts.size());
  for (size_t r = 0; r < counts.size(); ++r) (*receive_counts)[r] = to_int_count(counts[r], "reduce_scatter_v");
  MPI_Comm comm = comm_;
  return start_reduce_scatter(
      "reduce_scatter_v", input, output, op,
      [receive_counts, op, comm](const at::Tensor& send, const at::Tensor& receive, MPI_Request* request) {
        return MPI_Ireduce_scatter(send.data_ptr(), receive.data_ptr(), receive_counts->data(),
                                   mpi_type(send.scalar_type()), mpi_op(op, send.scalar_type()), comm, request);
      });
}

std::unique_ptr<Work> MpiCommunicator::all_gather_async(at::Tensor input, at::Tensor output) {
  require_cpu_contiguous(input, "all_gather");
  require_cpu_contiguous(output, "all_gather");
  check_even_split(input, output, size_, /*input_is_big=*/false, "all_gather");
  const int count = to_int_count(input.numel(), "all_gather");
  to_int_count(output.numel(), "all_gather");
  Launch launch;
  launch.kind = CollectiveKind::kAllGather;
  launch.total_bytes = output.numel() * output.element_size();
  MPI_Comm comm = comm_;
  launch.call = [input, output, count, comm](MPI_Request* request) {
    MPI_Datatype type = mpi_type(input.scalar_type());
    return MPI_Iallgather(input.data_ptr(), count, type, output.data_ptr(), count, type, comm, request);
  };
  launch.finish = [input, output]() {};  // keeps both alive until completion
  return start("all_gather", std::move(launch));
}

std::unique_ptr<Work> MpiCommunicator::all_gather_v_async(at::Tensor input, at::Tensor output,
                                                          const std::vector<int64_t>& counts) {
  require_cpu_contiguous(input, "all_gather_v");
  require_cpu_contiguous(output, "all_gather_v");
  const int64_t total = check_uneven_split(input, output, counts, rank_, size_, "all_gather_v");
  auto receive_counts = std::make_shared<std::vector<int>>(counts.size());
  auto displacements = std::make_shared<std::vector<int>>(counts.size());
  int64_t offset = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    (*receive_counts)[r] = to_int_count(counts[r], "all_gather_v");
    (*displacements)[r] = to_int_count(offset, "all_gather_v");
    offset += counts[r];
  }
  Launch launch;
  launch.kind = CollectiveKind::kAllGather;
  launch.total_bytes = total * output.element_size();
  MPI_Comm comm = comm_;
  launch.call = [input, output, receive_counts, displacements, comm](MPI_Request* request) {
    MPI_Datatype type = mpi_type(input.scalar_type());
    return MPI_Iallgatherv(input.data_ptr(), static_cast<int>(input.numel()), type, output.data_ptr(),
                           receive_counts->data(), displacements->data(), type, comm, request);
  };
  launch.finish = [input, output, receive_counts, displacements]() {};
  return start("all_gather_v", std::move(launch));
}

std::unique_ptr<Work> MpiCommunicator::broadcast_async(at::Tensor tensor, int root) {
  require_cpu_contiguous(tensor, "broadcast");
  TORCH_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " outside [0, ", size_, ")");
  const int count = to_int_count(tensor.numel(), "broadcast");
  Launch launch;
  launch.kind = CollectiveKind::kBroadcast;
  launch.total_bytes = rank_ == root ? tensor.numel() * tensor.element_size() : 0;
  MPI_Comm comm = comm_;
  launch.call = [tensor, count, root, comm](MPI_Request* request) {
    return MPI_Ibcast(tensor.data_ptr(), count, mpi_type(tensor.scalar_type()), root, comm, request);
  };
  launch.finish = [tensor]() {};
  return start("broadcast", std::move(launch));
}

void MpiCommunicator::barrier() {
  Launch launch;
  launch.kind = CollectiveKind::kBroadcast;
  launch.total_bytes = 0;
  MPI_Comm comm = comm_;
  launch.call = [comm](MPI_Request* request) { return MPI_Ibarrier(comm, request); };
  start("barrier", std::move(launch))->wait();
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  PhaseGuard guard(comm_, "MpiCommunicator::split", timeout_s_);
  MPI_Comm sub = MPI_COMM_NULL;
  ST_CHECK_MPI(with_mpi([&] { return MPI_Comm_split(comm_, color, key, &sub); }));
  auto out = std::make_unique<MpiCommunicator>(sub, timeout_s_);
  ST_CHECK_MPI(MPI_Comm_free(&sub));
  return out;
}

}  // namespace shardtrain
