// Rank and size of MPI_COMM_WORLD for multi-rank tests. Shared here rather than
// repeated per file: the *_mpi test files are compiled together (unity build,
// see tests/CMakeLists.txt), so file-local helpers with one name would clash.
#pragma once

#include <mpi.h>

namespace shardtrain_test {

inline int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

inline int world_size() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

}  // namespace shardtrain_test
