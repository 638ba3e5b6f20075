// Runs one failure on purpose, for the fault tests in tests/CMakeLists.txt:
//   fault_probe timeout    rank 1 arrives 20 s late to an all_reduce whose
//                          timeout is 1 s: rank 0 must abort naming rank 1
//   fault_probe mpi-error  an MPI call fails: the fatal path must print host,
//                          rank, file:line and MPI's message, then abort
//   fault_probe phase-stop rank 1 stops itself (SIGSTOP) before a raw
//                          MPI_Barrier that rank 0 waits in under a PhaseGuard
//                          of 2 s: rank 0's watchdog must abort the job, naming
//                          the phase and rank 1 as not arrived and not responding
//   fault_probe checkpoint-stop DIR   both ranks write a checkpoint with a 3 s
//                          phase timeout; run with SHARDTRAIN_FAULT_STOP set so
//                          that rank 1 stops itself inside a checkpoint phase
#include <ATen/ATen.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <thread>

#include "shardtrain/checkpoint/checkpoint.h"
#include "shardtrain/comm/mpi_communicator.h"
#include "shardtrain/comm/watchdog.h"
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
  } else if (std::strcmp(mode, "phase-stop") == 0) {
    // An earlier phase both ranks pass, so the board exists and rank 1's slot shows it.
    { shardtrain::PhaseGuard warm_up(world.comm(), "probe warm-up", 2.0); ST_CHECK_MPI(MPI_Barrier(world.comm())); }
    if (world.rank() == 1) std::raise(SIGSTOP);
    shardtrain::PhaseGuard guard(world.comm(), "probe barrier", 2.0);
    ST_CHECK_MPI(MPI_Barrier(world.comm()));
  } else if (std::strcmp(mode, "checkpoint-stop") == 0 && argc > 2) {
    shardtrain::set_default_phase_timeout_s(3.0);
    at::Tensor weights = at::arange(1000, at::kFloat);
    const int64_t half = 500;
    shardtrain::CheckpointWriter writer(std::string(argv[2]) + "/checkpoint_000001.h5", world.comm());
    writer.write_group("model", {shardtrain::TensorSlice{"w", {1000}, world.rank() * half,
                                                         weights.narrow(0, world.rank() * half, half)}});
    writer.commit();
  } else if (std::strcmp(mode, "mpi-error") == 0) {
    int value = 0;
    ST_CHECK_MPI(MPI_Send(&value, 1, MPI_INT, world.size() + 5, 0, world.comm()));
  }
  return 3;  // reaching here means the failure did not happen
}
