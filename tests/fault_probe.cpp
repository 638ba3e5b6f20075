// Runs one failure on purpose, for the fault tests in tests/CMakeLists.txt:
//   fault_probe timeout    rank 1 arrives 20 s late to an all_reduce whose
//                          timeout is 1 s: rank 0 must abort naming rank 1
//   fault_probe mpi-error  an MPI call fails: the fatal path must print host,
//                          rank, file:line and MPI's message, then abort
#include <ATen/ATen.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "shardtrain/comm/mpi_communicator.h"
#include "shardtrain/comm/world.h"
#include "shardtrain/core/check.h"

int main(int argc, char** argv) {
  shardtrain::World world(&argc, &argv);
  const char* mode = argc > 1 ? argv[1] : "";
  if (std::strcmp(mode, "timeout") == 0) {
    shardtrain::MpiCommunicator comm(world.comm(), /*timeout_s=*/1.0);
    if (comm.rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(20));
    at::Tensor t = at::ones({16});
    comm.all_reduce(t, shardtrain::ReduceOp::kSum);
  } else if (std::strcmp(mode, "mpi-error") == 0) {
    int value = 0;
    ST_CHECK_MPI(MPI_Send(&value, 1, MPI_INT, world.size() + 5, 0, world.comm()));
  }
  return 3;  // reaching here means the failure did not happen
}
