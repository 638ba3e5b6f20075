// Collectives over MpiCommunicator, at -np 2 and -np 4 (and any other size).
// Inputs are small integers, so every expected value is exact in every dtype
// tested, bfloat16 and float16 included (integers below 256 are exact there).
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <mpi.h>

#include <cstdlib>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "shardtrain/comm/mpi_communicator.h"
#include "shardtrain/core/check.h"

using shardtrain::MpiCommunicator;
using shardtrain::ReduceOp;

namespace {

const std::vector<at::ScalarType> kFloatTypes = {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf};
const std::vector<at::ScalarType> kAllTypes = {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf,
                                               at::kInt,   at::kLong,   at::kByte};
const std::vector<int64_t> kSizes = {1, 3, 1024, 100003};

// Element i of rank r's input: r + (i % 7).
at::Tensor rank_pattern(int64_t n, int rank, at::ScalarType dtype) {
  return (at::arange(n, at::kLong).remainder(7) + rank).to(dtype);
}

bool equal_as_double(const at::Tensor& actual, const at::Tensor& expected) {
  return at::equal(actual.to(at::kDouble), expected.to(at::kDouble));
}

}  // namespace

TEST_CASE("all_reduce sum, avg and max are exact for every dtype and size") {
  MpiCommunicator comm(MPI_COMM_WORLD);
  const int W = comm.size();
  const int r = comm.rank();
  for (auto dtype : kAllTypes) {
    for (int64_t n : kSizes) {
      CAPTURE(dtype);
      CAPTURE(n);
      at::Tensor base = at::arange(n, at::kLong).remainder(7).to(at::kDouble);
      at::Tensor sum = rank_pattern(n, r, dtype);
      comm.all_reduce(sum, ReduceOp::kSum);
      CHECK((sum.scalar_type() == dtype));
      CHECK(equal_as_double(sum, base * W + W * (W - 1) / 2));

      at::Tensor max = rank_pattern(n, r, dtype);
      comm.all_reduce(max, ReduceOp::kMax);
      CHECK(equal_as_double(max, base + (W - 1)));

      if (at::isFloatingType(dtype)) {
        at::Tensor avg = rank_pattern(n, r, dtype);
        comm.all_reduce(avg, ReduceOp::kAvg);
        // (W (W-1) / 2 + W k) / W = (W-1)/2 + k: a multiple of 0.5, exact.
        CHECK(equal_as_double(avg, base + (W - 1) / 2.0));
      } else {
        at::Tensor avg = rank_pattern(n, r, dtype);
        CHECK_THROWS_AS(comm.all_reduce(avg, ReduceOp::kAvg), c10::Error);
      }
    }
  }
}

TEST_CASE("reduce_scatter gives each rank the reduced chunk it owns") {
  MpiCommunicator comm(MPI_COMM_WORLD);
  const int W = comm.size();
  const int r = comm.rank();
  for (auto dtype : kFloatTypes) {
    for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{4099}}) {
      CAPTURE(dtype);
      CAPTURE(n);
      at::Tensor input = rank_pattern(n * W, r, dtype);
      at::Tensor output = at::full({n}, -1, at::TensorOptions().dtype(dtype));
      comm.reduce_scatter(input, output, ReduceOp::kSum);
      at::Tensor mine = at::arange(r * n, (r + 1) * n, at::kLong).remainder(7).to(at::kDouble);
      CHECK(equal_as_double(output, mine * W + W * (W - 1) / 2));

      at::Tensor avg_out = at::empty({n}, at::TensorOptions().dtype(dtype));
      comm.reduce_scatter(input, avg_out, ReduceOp::kAvg);
      CHECK(equal_as_double(avg_out, mine + (W - 1) / 2.0));

      at::Tensor max_out = at::empty({n}, at::TensorOptions().dtype(dtype));
      comm.reduce_scatter(input, max_out, ReduceOp::kMax);
      CHECK(equal_as_double(max_out, mine + (W - 1)));
    }
  }
  at::Tensor bad_in = at::zeros({3 * W + 1});
  at::Tensor bad_out = at::zeros({3});
  CHECK_THROWS_AS(comm.reduce_scatter(bad_in, bad_out, ReduceOp::kSum), c10::Error);
}

TEST_CASE("all_gather places rank r's input in chunk r") {
  MpiCommunicator comm(MPI_COMM_WORLD);
  const int W = comm.size();
  for (auto dtype : kAllTypes) {
    for (int64_t n : kSizes) {
      CAPTURE(dtype);
      CAPTURE(n);
      at::Tensor input = rank_pattern(n, comm.rank(), dtype);
      at::Tensor output = at::empty({W * n}, at::TensorOptions().dtype(dtype));
      comm.all_gather(input, output);
      for (int q = 0; q < W; ++q)
        CHECK(equal_as_double(output.narrow(0, q * n, n), rank_pattern(n, q, at::kDouble)));
    }
  }
}

TEST_CASE("all_gather_v handles uneven and empty contributions") {
  MpiCommunicator comm(MPI_COMM_WORLD);
  const int W = comm.size();
  // Rank q contributes 3q elements: rank 0 sends nothing.
  std::vector<int64_t> counts;
  for (int q = 0; q < W; ++q) counts.push_back(3 * q);
  int64_t total = 0;
  for (auto c : counts) total += c;
  for (auto dtype : kAllTypes) {
    CAPTURE(dtype);
    at::Tensor input = rank_pattern(counts[comm.rank()], comm.rank(), dtype);
    at::Tensor output = at::empty({total}, at::TensorOptions().dtype(dtype));
    comm.all_gather_v(input, output, counts);
    int64_t offset = 0;
    for (int q = 0; q < W; ++q) {
      CHECK(equal_as_double(output.narrow(0, offset, counts[q]), rank_pattern(counts[q], q, at::kDouble)));
      offset += counts[q];
    }
  }
  at::Tensor wrong = at::zeros({counts[comm.rank()] + 1});
  at::Tensor out = at::zeros({total});
  CHECK_THROWS_AS(comm.all_gather_v(wrong, out, counts), c10::Error);
}

TEST_CASE("broadcast copies the root's tensor everywhere") {
  MpiCommunicator comm(MPI_COMM_WORLD);
  for (auto dtype : kAllTypes) {
    for (int root : {0, comm.size() - 1}) {
      CAPTURE(dtype);
      CAPTURE(root);
      at::Tensor t = rank_pattern(1001, comm.rank(), dtype);
      comm.broadcast(t, root);
      CHECK(equal_as_double(t, rank_pattern(1001, root, at::kDouble)));
    }
  }
}

TEST_CASE("non-blocking collectives complete in any wait order") {
  MpiCommunicator comm(MPI_COMM_WORLD);
  const int W = comm.size();
  std::vector<at::Tensor> tensors;
  std::vector<std::unique_ptr<shardtrain::Work>> works;
  for (int k = 0; k < 8; ++k) {
    tensors.push_back(at::full({257 * (k + 1)}, static_cast<double>(k + comm.rank())));
    works.push_back(comm.all_reduce_async(tensors.back(), ReduceOp::kSum));
  }
  at::Tensor gathered = at::empty({W});
  auto gather = comm.all_gather_async(at::full({1}, static_cast<float>(comm.rank())), gathered);
  for (int k = 7; k >= 0; --k) {
    works[k]->wait();
    works[k]->wait();  // a second wait is harmless
    CHECK(works[k]->test());
    CHECK(at::equal(tensors[k], at::full_like(tensors[k], static_cast<double>(W * k + W * (W - 1) / 2))));
  }
  gather->wait();
  CHECK(at::equal(gathered, at::arange(W, at::kFloat)));
  comm.barrier();
}

TEST_CASE("sub-communicators: split by parity and reversed key order") {
  MpiCommunicator comm(MPI_COMM_WORLD);
  const int W = comm.size();
  const int r = comm.rank();
  auto parity = comm.split(r % 2, r);
  CHECK(parity->size() == (W + 1 - r % 2) / 2);
  CHECK(parity->rank() == r / 2);
  at::Tensor t = at::full({5}, static_cast<float>(r));
  parity->all_reduce(t, ReduceOp::kSum);
  float expected = 0;
  for (int q = r % 2; q < W; q += 2) expected += static_cast<float>(q);
  CHECK(at::equal(t, at::full({5}, expected)));

  // key = -rank reverses the order: world rank W-1 becomes rank 0.
  auto reversed = comm.split(0, -r);
  CHECK(reversed->rank() == W - 1 - r);
  at::Tensor b = at::full({3}, static_cast<float>(r));
  reversed->broadcast(b, 0);
  CHECK(at::equal(b, at::full({3}, static_cast<float>(W - 1))));

  // Node-style groups of two consecutive ranks, and the "across groups" comm.
  auto intra = comm.split(r / 2, r);
  auto inter = comm.split(r % 2, r / 2);
  at::Tensor x = at::full({2}, 1.0f);
  intra->all_reduce(x, ReduceOp::kSum);
  inter->all_reduce(x, ReduceOp::kSum);
  CHECK(x[0].item<float>() == static_cast<float>(W));
}

TEST_CASE("node groups: intra-node and inter-node communicators") {
  MpiCommunicator comm(MPI_COMM_WORLD);
  const int W = comm.size();
  const int r = comm.rank();
  for (int per_node : {1, 2, W}) {
    if (W % per_node != 0) continue;
    CAPTURE(per_node);
    auto groups = shardtrain::split_into_nodes(comm, per_node);
    CHECK(groups.intra->size() == per_node);
    CHECK(groups.intra->rank() == r % per_node);
    CHECK(groups.inter->size() == W / per_node);
    CHECK(groups.inter->rank() == r / per_node);
    // Sum of world ranks within my block, then across blocks = sum of all ranks.
    at::Tensor t = at::full({7}, static_cast<double>(r));
    groups.intra->all_reduce(t, ReduceOp::kSum);
    const int first = r / per_node * per_node;
    CHECK(t[0].item<double>() == per_node * first + per_node * (per_node - 1) / 2);
    groups.inter->all_reduce(t, ReduceOp::kSum);
    CHECK(t[6].item<double>() == W * (W - 1) / 2);
  }
  if (W > 1) CHECK_THROWS_AS(shardtrain::split_into_nodes(comm, W + 1), shardtrain::Error);
}

TEST_CASE("stats count ring bytes per collective") {
  MpiCommunicator comm(MPI_COMM_WORLD);
  const int W = comm.size();
  at::Tensor t = at::zeros({1024});  // 4096 bytes
  comm.all_reduce(t, ReduceOp::kSum);
  at::Tensor out = at::zeros({1024 * W});
  comm.all_gather(t, out);
  CHECK(comm.stats().num_collectives == 2);
  const int64_t all_reduce = 2 * 4096 * (W - 1) / W;
  const int64_t all_gather = 4096 * W * (W - 1) / W;
  CHECK(comm.stats().bytes_sent == all_reduce + all_gather);
}

TEST_CASE("bad tensors are refused before any MPI call") {
  MpiCommunicator comm(MPI_COMM_WORLD);
  at::Tensor strided = at::zeros({4, 4}).t();
  CHECK_THROWS_AS(comm.all_reduce(strided, ReduceOp::kSum), c10::Error);
  at::Tensor complex = at::zeros({4}, at::kComplexFloat);
  CHECK_THROWS(comm.all_reduce(complex, ReduceOp::kSum));
  comm.barrier();
}

#if defined(__GLIBC__)
TEST_CASE("World serves large blocks from the heap instead of one mmap each (comm/world.h)") {
  // test_main built a World. Where the environment sets glibc's own malloc
  // knobs, World leaves malloc alone and there is nothing to check.
  for (const char* name : {"MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES"})
    if (std::getenv(name) != nullptr) return;
  const size_t mapped_before = mallinfo2().hblks;
  void* block = std::malloc(size_t{64} << 20);  // far above glibc's largest default mmap threshold (32 MB)
  REQUIRE(block != nullptr);
  const size_t mapped_during = mallinfo2().hblks;
  std::free(block);
  CHECK(mapped_during == mapped_before);
}
#endif

TEST_CASE("16-bit floats are reduced as 16-bit words, each combination rounded to nearest-even") {
  MpiCommunicator comm(MPI_COMM_WORLD);
  const int W = comm.size();
  for (auto dtype : {at::kBFloat16, at::kHalf}) {
    CAPTURE(dtype);
    // Rank r holds 1 + r u, u the unit in the last place at 1 (exact in the
    // format); sums above 2 have a unit of 2u, so 2 + u is a tie that
    // nearest-even rounds down to 2.
    const double u = dtype == at::kBFloat16 ? std::ldexp(1.0, -7) : std::ldexp(1.0, -10);
    const int64_t n = 1000;
    at::Tensor x = at::full({n}, 1.0 + comm.rank() * u, at::TensorOptions().dtype(dtype));
    CHECK(x[0].item<double>() == 1.0 + comm.rank() * u);
    comm.reset_stats();
    comm.all_reduce(x, ReduceOp::kSum);
    CHECK(comm.stats().bytes_sent == shardtrain::bytes_on_wire(shardtrain::CollectiveKind::kAllReduce, n * 2, W));
    const double got = x[0].item<double>();
    CHECK(at::equal(x, at::full({n}, got, at::TensorOptions().dtype(dtype))));  // every element alike
    const double exact = W + u * W * (W - 1) / 2;
    if (W == 2) CHECK(got == 2.0);  // one combination: 2 + u, a tie, to even
    // W - 1 combinations, each off by at most half a unit of a partial sum
    // (<= W, unit <= W u): within (W - 1) W u / 2 of the exact sum.
    CHECK(std::abs(got - exact) <= (W - 1) * W * u / 2);
  }
}
