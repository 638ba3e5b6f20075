// Collectives over NcclCommunicator, at -np 2 and -np 4: the same exact-integer
// checks as test_comm_mpi.cpp, on CUDA tensors. Inputs are small integers, so
// every expected value is exact in every dtype (bfloat16 and float16 hold
// integers up to 256 exactly; the largest value here is 6 * 4 + 6 = 30).
//
// Skips (each test case prints why and returns, on every rank alike) when the
// library was built without NCCL, when no CUDA device is visible, or when more
// ranks share a node than it has GPUs: NCCL refuses two ranks of one
// communicator on the same GPU ("Duplicate GPU detected"). On a one-GPU machine
// run `mpiexec -np 1 tests/shardtrain_mpi_tests --source-file='*/test_nccl_mpi.cpp'`.
//
// Device tensors are made with copy_to_device and checked on the host after
// copy_to_host, so the test runs with a CPU LibTorch too (torch cannot run
// kernels on such tensors; the test never asks it to).
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <mpi.h>

#include <string>

#include "shardtrain/comm/nccl_communicator.h"
#include "shardtrain/core/log.h"

#if SHARDTRAIN_HAVE_NCCL

using shardtrain::NcclCommunicator;
using shardtrain::ReduceOp;
using shardtrain::copy_to_device;
using shardtrain::copy_to_host;

namespace {

struct Gpu {
  int device = 0;
  std::string skip;  // why the tests cannot run here; empty when they can
};

// Decided collectively so that every rank skips or runs the same cases.
Gpu probe_gpu() {
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int local_rank = 0, local_size = 1;
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_size(node, &local_size);
  MPI_Comm_free(&node);
  int devices = NcclCommunicator::num_visible_devices();
  int min_devices = 0, max_local_size = 0;
  MPI_Allreduce(&devices, &min_devices, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&local_size, &max_local_size, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  Gpu gpu;
  if (min_devices == 0) {
    gpu.skip = "no CUDA device: NCCL tests skipped";
  } else if (max_local_size > min_devices) {
    gpu.skip = shardtrain::str_format(
        "%d ranks on a node with %d CUDA device(s), and NCCL needs a distinct GPU per rank: NCCL tests "
        "skipped (run with at most %d ranks per node)",
        max_local_size, min_devices, min_devices);
  } else {
    gpu.device = NcclCommunicator::device_for_local_rank(local_rank);
  }
  return gpu;
}

const Gpu& gpu() {
  static const Gpu probed = probe_gpu();
  return probed;
}

#define SKIP_WITHOUT_GPUS()   \
  do {                        \
    if (!gpu().skip.empty()) { \
      MESSAGE(gpu().skip);    \
      return;                 \
    }                         \
  } while (0)

const std::vector<at::ScalarType> kFloatTypes = {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf};
const std::vector<at::ScalarType> kAllTypes = {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf,
                                               at::kInt,   at::kLong,   at::kByte,     at::kChar};
const std::vector<int64_t> kSizes = {1, 3, 1024, 100003};

// Element i of rank r's input: r + (i % 7).
at::Tensor rank_pattern(int64_t n, int rank, at::ScalarType dtype) {
  return (at::arange(n, at::kLong).remainder(7) + rank).to(dtype);
}

at::Tensor on_gpu(const at::Tensor& host) { return copy_to_device(host, gpu().device); }

bool equal_as_double(const at::Tensor& device_actual, const at::Tensor& expected) {
  return at::equal(copy_to_host(device_actual).to(at::kDouble), expected.to(at::kDouble));
}

}  // namespace

TEST_CASE("nccl: all_reduce sum, avg and max are exact for every dtype and size") {
  SKIP_WITHOUT_GPUS();
  NcclCommunicator comm(MPI_COMM_WORLD, gpu().device);
  CHECK(comm.backend() == "nccl");
  const int W = comm.size();
  const int r = comm.rank();
  for (auto dtype : kAllTypes) {
    for (int64_t n : kSizes) {
      CAPTURE(dtype);
      CAPTURE(n);
      at::Tensor base = at::arange(n, at::kLong).remainder(7).to(at::kDouble);
      at::Tensor sum = on_gpu(rank_pattern(n, r, dtype));
      comm.all_reduce(sum, ReduceOp::kSum);
      CHECK((sum.scalar_type() == dtype));
      CHECK(equal_as_double(sum, base * W + W * (W - 1) / 2));

      at::Tensor max = on_gpu(rank_pattern(n, r, dtype));
      comm.all_reduce(max, ReduceOp::kMax);
      CHECK(equal_as_double(max, base + (W - 1)));

      at::Tensor avg = on_gpu(rank_pattern(n, r, dtype));
      if (at::isFloatingType(dtype)) {
        comm.all_reduce(avg, ReduceOp::kAvg);
        // (W (W-1) / 2 + W k) / W = (W-1)/2 + k: a multiple of 0.5, exact.
        CHECK(equal_as_double(avg, base + (W - 1) / 2.0));
      } else {
        CHECK_THROWS_AS(comm.all_reduce(avg, ReduceOp::kAvg), c10::Error);
      }
    }
  }
}

TEST_CASE("nccl: reduce_scatter gives each rank the reduced chunk it owns") {
  SKIP_WITHOUT_GPUS();
  NcclCommunicator comm(MPI_COMM_WORLD, gpu().device);
  const int W = comm.size();
  const int r = comm.rank();
  for (auto dtype : kFloatTypes) {
    for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{4099}}) {
      CAPTURE(dtype);
      CAPTURE(n);
      at::Tensor input = on_gpu(rank_pattern(n * W, r, dtype));
      at::Tensor mine = at::arange(r * n, (r + 1) * n, at::kLong).remainder(7).to(at::kDouble);

      at::Tensor sum = on_gpu(at::full({n}, -1, at::TensorOptions().dtype(dtype)));
      comm.reduce_scatter(input, sum, ReduceOp::kSum);
      CHECK(equal_as_double(sum, mine * W + W * (W - 1) / 2));

      at::Tensor avg = on_gpu(at::full({n}, -1, at::TensorOptions().dtype(dtype)));
      comm.reduce_scatter(input, avg, ReduceOp::kAvg);
      CHECK(equal_as_double(avg, mine + (W - 1) / 2.0));

      at::Tensor max = on_gpu(at::full({n}, -1, at::TensorOptions().dtype(dtype)));
      comm.reduce_scatter(input, max, ReduceOp::kMax);
      CHECK(equal_as_double(max, mine + (W - 1)));
    }
  }
  at::Tensor bad_in = on_gpu(at::zeros({3 * W + 1}));
  at::Tensor bad_out = on_gpu(at::zeros({3}));
  CHECK_THROWS_AS(comm.reduce_scatter(bad_in, bad_out, ReduceOp::kSum), c10::Error);
}

TEST_CASE("nccl: all_gather places rank r's input in chunk r") {
  SKIP_WITHOUT_GPUS();
  NcclCommunicator comm(MPI_COMM_WORLD, gpu().device);
  const int W = comm.size();
  for (auto dtype : kAllTypes) {
    for (int64_t n : kSizes) {
      CAPTURE(dtype);
      CAPTURE(n);
      at::Tensor input = on_gpu(rank_pattern(n, comm.rank(), dtype));
      at::Tensor output = on_gpu(at::full({W * n}, -1, at::TensorOptions().dtype(dtype)));
      comm.all_gather(input, output);
      at::Tensor got = copy_to_host(output).to(at::kDouble);
      for (int q = 0; q < W; ++q) CHECK(at::equal(got.narrow(0, q * n, n), rank_pattern(n, q, at::kDouble)));
    }
  }
}

TEST_CASE("nccl: all_gather_v handles uneven and empty contributions") {
  SKIP_WITHOUT_GPUS();
  NcclCommunicator comm(MPI_COMM_WORLD, gpu().device);
  const int W = comm.size();
  // Rank q contributes 3q elements: rank 0 sends nothing.
  std::vector<int64_t> counts;
  for (int q = 0; q < W; ++q) counts.push_back(3 * q);
  int64_t total = 0;
  for (auto c : counts) total += c;
  for (auto dtype : kAllTypes) {
    CAPTURE(dtype);
    at::Tensor input = on_gpu(rank_pattern(counts[comm.rank()], comm.rank(), dtype));
    at::Tensor output = on_gpu(at::full({total}, -1, at::TensorOptions().dtype(dtype)));
    comm.all_gather_v(input, output, counts);
    at::Tensor got = copy_to_host(output).to(at::kDouble);
    int64_t offset = 0;
    for (int q = 0; q < W; ++q) {
      CHECK(at::equal(got.narrow(0, offset, counts[q]), rank_pattern(counts[q], q, at::kDouble)));
      offset += counts[q];
    }
  }
  at::Tensor wrong = on_gpu(at::zeros({counts[comm.rank()] + 1}));
  at::Tensor out = on_gpu(at::zeros({total}));
  CHECK_THROWS_AS(comm.all_gather_v(wrong, out, counts), c10::Error);
}

TEST_CASE("nccl: broadcast copies the root's tensor everywhere") {
  SKIP_WITHOUT_GPUS();
  NcclCommunicator comm(MPI_COMM_WORLD, gpu().device);
  for (auto dtype : kAllTypes) {
    for (int root : {0, comm.size() - 1}) {
      CAPTURE(dtype);
      CAPTURE(root);
      at::Tensor t = on_gpu(rank_pattern(1001, comm.rank(), dtype));
      comm.broadcast(t, root);
      CHECK(equal_as_double(t, rank_pattern(1001, root, at::kDouble)));
    }
  }
}

TEST_CASE("nccl: non-blocking collectives complete in any wait order") {
  SKIP_WITHOUT_GPUS();
  NcclCommunicator comm(MPI_COMM_WORLD, gpu().device);
  const int W = comm.size();
  std::vector<at::Tensor> tensors;
  std::vector<std::unique_ptr<shardtrain::Work>> works;
  for (int k = 0; k < 8; ++k) {
    tensors.push_back(on_gpu(at::full({257 * (k + 1)}, static_cast<double>(k + comm.rank()))));
    works.push_back(comm.all_reduce_async(tensors.back(), ReduceOp::kSum));
  }
  at::Tensor gathered = on_gpu(at::empty({W}));
  auto gather = comm.all_gather_async(on_gpu(at::full({1}, static_cast<float>(comm.rank()))), gathered);
  for (int k = 7; k >= 0; --k) {
    works[k]->wait();
    works[k]->wait();  // a second wait is harmless
    CHECK(works[k]->test());
    CHECK(equal_as_double(tensors[k], at::full({257 * (k + 1)}, static_cast<double>(W * k + W * (W - 1) / 2))));
  }
  gather->wait();
  CHECK(equal_as_double(gathered, at::arange(W, at::kFloat)));
  comm.barrier();
}

TEST_CASE("nccl: sub-communicators: split by parity and reversed key order") {
  SKIP_WITHOUT_GPUS();
  NcclCommunicator comm(MPI_COMM_WORLD, gpu().device);
  const int W = comm.size();
  const int r = comm.rank();
  auto parity = comm.split(r % 2, r);
  CHECK(parity->backend() == "nccl");
  CHECK(parity->size() == (W + 1 - r % 2) / 2);
  CHECK(parity->rank() == r / 2);
  at::Tensor t = on_gpu(at::full({5}, static_cast<float>(r)));
  parity->all_reduce(t, ReduceOp::kSum);
  float expected = 0;
  for (int q = r % 2; q < W; q += 2) expected += static_cast<float>(q);
  CHECK(equal_as_double(t, at::full({5}, expected)));

  // key = -rank reverses the order: world rank W-1 becomes rank 0.
  auto reversed = comm.split(0, -r);
  CHECK(reversed->rank() == W - 1 - r);
  at::Tensor b = on_gpu(at::full({3}, static_cast<float>(r)));
  reversed->broadcast(b, 0);
  CHECK(equal_as_double(b, at::full({3}, static_cast<float>(W - 1))));

  // Node-style groups of two consecutive ranks, and the "across groups" comm.
  auto intra = comm.split(r / 2, r);
  auto inter = comm.split(r % 2, r / 2);
  at::Tensor x = on_gpu(at::full({2}, 1.0f));
  intra->all_reduce(x, ReduceOp::kSum);
  inter->all_reduce(x, ReduceOp::kSum);
  CHECK(equal_as_double(x, at::full({2}, static_cast<float>(W))));
}

TEST_CASE("nccl: stats count ring bytes per collective") {
  SKIP_WITHOUT_GPUS();
  NcclCommunicator comm(MPI_COMM_WORLD, gpu().device);
  const int W = comm.size();
  at::Tensor t = on_gpu(at::zeros({1024}));  // 4096 bytes
  comm.all_reduce(t, ReduceOp::kSum);
  at::Tensor out = on_gpu(at::zeros({1024 * W}));
  comm.all_gather(t, out);
  CHECK(comm.stats().num_collectives == 2);
  const int64_t all_reduce = 2 * 4096 * (W - 1) / W;
  const int64_t all_gather = 4096 * W * (W - 1) / W;
  CHECK(comm.stats().bytes_sent == all_reduce + all_gather);
}

TEST_CASE("nccl: bad tensors are refused before any NCCL call") {
  SKIP_WITHOUT_GPUS();
  NcclCommunicator comm(MPI_COMM_WORLD, gpu().device);
  CHECK_THROWS_AS(comm.all_reduce(at::zeros({4}), ReduceOp::kSum), c10::Error);  // a CPU tensor
  CHECK_THROWS(comm.all_reduce(on_gpu(at::zeros({4}, at::kComplexFloat)), ReduceOp::kSum));
  CHECK_THROWS_AS(comm.broadcast(on_gpu(at::zeros({4})), comm.size()), c10::Error);
  comm.barrier();
}

#else  // !SHARDTRAIN_HAVE_NCCL

TEST_CASE("nccl: collectives") {
  MESSAGE("built without NCCL (SHARDTRAIN_HAVE_NCCL unset): NCCL tests skipped");
}

#endif
