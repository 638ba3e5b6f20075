// Rank and size of MPI_COMM_WORLD and small helpers for multi-rank tests. Shared here rather than
// repeated per file: the *_mpi test files are compiled together (unity build,
// see tests/CMakeLists.txt), so file-local helpers with one name would clash.
#pragma once

#include <mpi.h>

#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>
#include <stdlib.h>

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

// Collective: a fresh, empty directory /tmp/shardtrain_<name>_XXXXXX (mkdtemp
// on rank 0), the same path on every rank. Throws on every rank if it cannot
// be created.
inline std::string make_shared_temp_dir(const std::string& name) {
  std::vector<char> buffer(512, '\0');
  if (world_rank() == 0) {
    std::snprintf(buffer.data(), buffer.size(), "/tmp/shardtrain_%s_XXXXXX", name.c_str());
    if (mkdtemp(buffer.data()) == nullptr) buffer[0] = '\0';
  }
  MPI_Bcast(buffer.data(), static_cast<int>(buffer.size()), MPI_CHAR, 0, MPI_COMM_WORLD);
  if (buffer[0] == '\0') throw std::runtime_error("cannot create a temporary directory for " + name);
  return buffer.data();
}

// Collective: removes a make_shared_temp_dir() directory once every rank is done with it.
inline void remove_shared_dir(const std::string& dir) {
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) std::filesystem::remove_all(dir);
}

// Collective: a communicator of world ranks 0 .. ranks-1 (in order), or
// MPI_COMM_NULL on the other ranks. The caller frees it (MPI_Comm_free).
inline MPI_Comm first_world_ranks(int ranks) {
  MPI_Comm part = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() < ranks ? 0 : MPI_UNDEFINED, world_rank(), &part);
  return part;
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace shardtrain_test
