#include "shardtrain/comm/world.h"

#include <ATen/Parallel.h>
#include <sched.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <cstdlib>
#include <thread>

#include "shardtrain/comm/watchdog.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain {
namespace {

int cores_available() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int count = CPU_COUNT(&set);
    if (count > 0) return count;
  }
  unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? static_cast<int>(hw) : 1;
}

// See world.h: large blocks from the heap, freed memory kept for reuse.
void keep_freed_memory() {
#if defined(__GLIBC__)
  for (const char* name : {"MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES"})
    if (std::getenv(name) != nullptr) return;
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

}  // namespace

World::World(int* argc, char*** argv) {
  keep_freed_memory();
  int provided = MPI_THREAD_SINGLE;
  ST_CHECK_MPI(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
  // Errors come back as codes so that ST_CHECK_MPI can report them with context.
  ST_CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  thread_multiple_ = provided >= MPI_THREAD_MULTIPLE;
  ST_CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
  ST_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
  ST_CHECK_MPI(MPI_Comm_size(comm_, &size_));
  set_log_rank(rank_);

  PhaseGuard guard(comm_, "start-up: finding the ranks of each node");
  MPI_Comm node_comm = MPI_COMM_NULL;
  ST_CHECK_MPI(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_comm));
  ST_CHECK_MPI(MPI_Comm_rank(node_comm, &local_rank_));
  ST_CHECK_MPI(MPI_Comm_size(node_comm, &local_size_));
  // Node index: rank among the first ranks of each node, shared with the node.
  MPI_Comm leaders = MPI_COMM_NULL;
  ST_CHECK_MPI(MPI_Comm_split(comm_, local_rank_ == 0 ? 0 : MPI_UNDEFINED, rank_, &leaders));
  if (leaders != MPI_COMM_NULL) {
    ST_CHECK_MPI(MPI_Comm_rank(leaders, &node_index_));
    ST_CHECK_MPI(MPI_Comm_size(leaders, &num_nodes_));
    ST_CHECK_MPI(MPI_Comm_free(&leaders));
  }
  int layout[2] = {node_index_, num_nodes_};
  {
    PhaseGuard node_guard(node_comm, "start-up: sharing the node index");
    ST_CHECK_MPI(MPI_Bcast(layout, 2, MPI_INT, 0, node_comm));
  }
  node_index_ = layout[0];
  num_nodes_ = layout[1];
  ST_CHECK_MPI(MPI_Comm_free(&node_comm));

  const char* omp = std::getenv("OMP_NUM_THREADS");
  int from_env = omp ? std::atoi(omp) : 0;
  if (from_env > 0) {
    num_threads_ = from_env;
  } else {
    num_threads_ = std::max(1, cores_available() / std::max(1, local_size_));
  }
  at::set_num_threads(num_threads_);
}

World::~World() {
  // A destructor must not throw (that would std::terminate mid-unwind): warn.
  if (comm_ != MPI_COMM_NULL && MPI_Comm_free(&comm_) != MPI_SUCCESS) log_warn("MPI_Comm_free failed at shutdown");
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && MPI_Finalize() != MPI_SUCCESS) log_warn("MPI_Finalize failed at shutdown");
}

int World::max_over_ranks(int value) const {
  PhaseGuard guard(comm_, "World::max_over_ranks");
  int out = value;
  ST_CHECK_MPI(MPI_Allreduce(&value, &out, 1, MPI_INT, MPI_MAX, comm_));
  return out;
}

int World::min_over_ranks(int value) const {
  PhaseGuard guard(comm_, "World::min_over_ranks");
  int out = value;
  ST_CHECK_MPI(MPI_Allreduce(&value, &out, 1, MPI_INT, MPI_MIN, comm_));
  return out;
}

}  // namespace shardtrain
