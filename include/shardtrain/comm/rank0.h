// Rank 0 does it, every rank learns the outcome: for the work only one rank
// should do (files of the run folder, scanning a directory) inside a job
// where every rank must leave together when it fails.
//
//   run_on_rank0(comm, [&] { write_file_atomic(path, text); });   // an Error on rank 0 is thrown on every rank
//   std::string path = broadcast_string(rank == 0 ? newest() : "", comm);
//
// Both are collective over comm and check every MPI call.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>

#include "shardtrain/core/check.h"

namespace shardtrain {

// Rank 0's `text` on every rank.
std::string broadcast_string(const std::string& text, MPI_Comm comm);
// Rank 0's `value` on every rank.
int64_t broadcast_int(int64_t value, MPI_Comm comm);

// Runs `body` on rank 0 only; a shardtrain::Error it throws is rethrown on
// every rank (the same message), so all ranks leave together and the CLI
// reports it once. Anything else it throws aborts the job (a bug).
template <class F>
void run_on_rank0(MPI_Comm comm, F&& body) {
  int rank = 0;
  ST_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  std::string error;
  if (rank == 0) {
    try {
      body();
    } catch (const Error& e) {
      error = e.what();
      if (error.empty()) error = "error";
    }
  }
  error = broadcast_string(error, comm);
  if (!error.empty()) throw Error(error);
}

}  // namespace shardtrain
