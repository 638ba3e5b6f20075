// Rank and size of MPI_COMM_WORLD and small helpers for multi-rank tests. Shared here rather than
// repeated per file: the *_mpi test files are compiled together (unity build,
// see tests/CMakeLists.txt), so file-local helpers with one name would clash.
#pragma once

#include <mpi.h>

#include <string>

#include "shardtrain/core/check.h"

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

// True on every rank when `ok` is true on every rank (collective).
inline bool all_ranks(bool ok) {
  int mine = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

// The message of the shardtrain::Error that f() throws, or "(no error)".
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const shardtrain::Error& e) {
    return e.what();
  }
  return "(no error)";
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace shardtrain_test
