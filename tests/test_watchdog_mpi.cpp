// The phase watchdog's guards and the checked, guarded collectives of
// comm/mpi_helpers.h over real MPI (np 2 and 4). The watchdog's abort itself
// (a rank that stops inside a phase) is the fault_phase_* tests in
// tests/CMakeLists.txt, which run tests/fault_probe.cpp.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <mpi.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "shardtrain/comm/mpi_helpers.h"
#include "shardtrain/comm/watchdog.h"
#include "shardtrain/core/check.h"
#include "support/mpi_ranks.h"

using namespace shardtrain;
using shardtrain_test::error_of;
using shardtrain_test::world_rank;
using shardtrain_test::world_size;

TEST_CASE("phase guards nest, name the open phases and end without a timeout") {
  CHECK(current_phase_names().empty());
  {
    PhaseGuard outer(MPI_COMM_WORLD, "training step 7", 30.0);
    {
      PhaseGuard inner(MPI_COMM_WORLD, "eval gather", 30.0);
      CHECK(current_phase_names() == "training step 7 > eval gather");
      ST_CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    }
    CHECK(current_phase_names() == "training step 7");
  }
  CHECK(current_phase_names().empty());
  // A guard on one rank alone, and many short guards in a row (no leak of deadlines).
  for (int i = 0; i < 1000; ++i) PhaseGuard alone(MPI_COMM_SELF, "local phase", 30.0);
  // A phase that lasts longer than the heartbeat period but less than its timeout.
  {
    PhaseGuard slow(MPI_COMM_WORLD, "slow but in time", 5.0);
    if (world_rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(700));
    ST_CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
  }
  CHECK(default_phase_timeout_s() > 0);
}

TEST_CASE("guarded helpers: broadcasts, reductions, gathers") {
  const int rank = world_rank(), size = world_size();
  const std::string root_text = rank == 0 ? std::string(100000, 'r') : "ignored";
  CHECK(broadcast_string(root_text, MPI_COMM_WORLD, "test broadcast") == std::string(100000, 'r'));
  CHECK(broadcast_string(rank == size - 1 ? "from the last" : "", MPI_COMM_WORLD, "test broadcast", size - 1) ==
        "from the last");
  CHECK(broadcast_string("", MPI_COMM_WORLD, "test broadcast").empty());
  struct Pair {
    int64_t a;
    double b;
  };
  const Pair p = broadcast_value(Pair{rank == 0 ? 42 : -1, rank == 0 ? 0.5 : -1.0}, MPI_COMM_WORLD, "test value");
  CHECK(p.a == 42);
  CHECK(p.b == 0.5);
  CHECK(max_over_ranks(int64_t{rank}, MPI_COMM_WORLD, "test max") == size - 1);
  CHECK(min_over_ranks(int64_t{rank} + 5, MPI_COMM_WORLD, "test min") == 5);
  CHECK(max_over_ranks(rank * 0.25, MPI_COMM_WORLD, "test max") == (size - 1) * 0.25);
  CHECK(sum_over_ranks(1.5, MPI_COMM_WORLD, "test sum") == 1.5 * size);
  uint64_t values[2] = {uint64_t{1} << 63, static_cast<uint64_t>(rank)};
  // Unsigned sums wrap modulo 2^64, as the checkpoint checksums rely on.
  all_reduce_in_place(values, 2, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD, "test wrap");
  CHECK(values[0] == (size % 2 == 0 ? 0 : uint64_t{1} << 63));
  CHECK(values[1] == static_cast<uint64_t>(size * (size - 1) / 2));
  const std::vector<std::string> all =
      all_gather_strings(std::string(static_cast<size_t>(rank), 'x'), MPI_COMM_WORLD, "test gather");
  REQUIRE(static_cast<int>(all.size()) == size);
  for (int r = 0; r < size; ++r) CHECK(all[static_cast<size_t>(r)] == std::string(static_cast<size_t>(r), 'x'));
  barrier(MPI_COMM_WORLD, "test barrier");
}

TEST_CASE("rank 0's result or its Error reaches every rank") {
  const int rank = world_rank();
  int calls = 0;
  CHECK(rank0_value(MPI_COMM_WORLD, "test value", [&] {
          ++calls;
          return std::string("newest.h5");
        }) == "newest.h5");
  CHECK(calls == (rank == 0 ? 1 : 0));
  CHECK(rank0_value(MPI_COMM_WORLD, "test value", [&] { return int64_t{17}; }) == 17);
  CHECK(error_of([&] {
          on_rank0(MPI_COMM_WORLD, "test error", [] { throw Error("run folder runs/q is in use"); });
        }) == "run folder runs/q is in use");
  CHECK(error_of([&] {
          rank0_value(MPI_COMM_WORLD, "test error", []() -> std::string { throw Error("no checkpoint"); });
        }) == "no checkpoint");
  // Not an Error on rank 0: every rank still leaves, with the phase named.
  CHECK(error_of([&] { on_rank0(MPI_COMM_WORLD, "reading x", [] { throw std::runtime_error("boom"); }); }) ==
        "reading x: boom");
  CHECK(error_of([&] { on_rank0(MPI_COMM_WORLD, "reading x", [] { throw std::bad_alloc(); }); }) ==
        "reading x: out of memory on rank 0 (an allocation failed)");
}

TEST_CASE("throw_if_any_failed: every rank throws the lowest failing rank's problem") {
  const int rank = world_rank(), size = world_size();
  throw_if_any_failed("", MPI_COMM_WORLD, "nothing failed");
  const std::string message = error_of([&] {
    throw_if_any_failed(rank >= size / 2 ? "disk full on rank " + std::to_string(rank) : "", MPI_COMM_WORLD,
                        "test agreement");
  });
  const int first = size / 2;
  if (rank == first)
    CHECK(message == "disk full on rank " + std::to_string(first));
  else
    CHECK(message == "disk full on rank " + std::to_string(first) + " (on world rank " + std::to_string(first) + ")");
}
