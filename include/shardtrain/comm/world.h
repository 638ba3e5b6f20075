// World: the MPI job as this process sees it.
//
// Constructing a World initialises MPI (asking for MPI_THREAD_MULTIPLE, because
// non-blocking collectives may be started from autograd threads) and learns the
// layout of the job: global rank and size, the ranks sharing this node
// (MPI_Comm_split_type SHARED), the node index, and how many compute threads
// each rank should use. Destroying it finalises MPI. Exactly one World exists
// per process; create it first thing in main().
//
// Host memory: before MPI starts, World tells glibc's malloc to serve large
// blocks from its heap and to keep freed memory (mallopt M_MMAP_MAX = 0, a
// high M_TRIM_THRESHOLD) instead of mapping and unmapping every large block.
// A training step allocates and frees the same large buffers every step (MPI's
// collective temporaries, torch's tensors, zero3's gathered units), and fresh
// pages cost a page fault each: on the 2-core VM this project is built on,
// a 64 MB MPI all-reduce took 267 ms with the default and 27 ms with this
// (benchmarks/README.md). The price is that memory freed during the run is not
// returned to the OS before the process ends. Set any of MALLOC_MMAP_MAX_,
// MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_ or GLIBC_TUNABLES to keep
// glibc's own settings.
#pragma once

#include <mpi.h>

namespace shardtrain {

class World {
 public:
  World(int* argc, char*** argv);
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Rank among the processes on this node, and how many share the node.
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  int node_index() const { return node_index_; }
  int num_nodes() const { return num_nodes_; }
  // Intra-op threads per rank: OMP_NUM_THREADS when set, else the cores this
  // process may run on divided by the ranks on the node (at least 1).
  int num_threads() const { return num_threads_; }
  // True when MPI granted MPI_THREAD_MULTIPLE; otherwise MPI calls are serialised.
  bool thread_multiple() const { return thread_multiple_; }
  // A duplicate of MPI_COMM_WORLD owned by shardtrain.
  MPI_Comm comm() const { return comm_; }

  // Collective helpers for start-up decisions (exit codes, agreement checks).
  int max_over_ranks(int value) const;
  int min_over_ranks(int value) const;

 private:
  int rank_ = 0, size_ = 1;
  int local_rank_ = 0, local_size_ = 1;
  int node_index_ = 0, num_nodes_ = 1;
  int num_threads_ = 1;
  bool thread_multiple_ = false;
  MPI_Comm comm_ = MPI_COMM_NULL;
};

}  // namespace shardtrain
