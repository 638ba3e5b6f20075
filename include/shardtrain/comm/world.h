// World: the MPI job as this process sees it.
//
// Constructing a World initialises MPI (asking for MPI_THREAD_MULTIPLE, because
// non-blocking collectives may be started from autograd threads) and learns the
// layout of the job: global rank and size, the ranks sharing this node
// (MPI_Comm_split_type SHARED), the node index, and how many compute threads
// each rank should use. Destroying it finalises MPI. Exactly one World exists
// per process; create it first thing in main().
//
// Threads follow the cores a rank may run on (comm/affinity.h): World reads
// each rank's affinity mask, counts the ranks of the node whose masks overlap,
// and sets torch's intra-op threads to OMP_NUM_THREADS, or without it to the
// mask's cores divided by the ranks sharing them. Rank 0 warns (once per
// distinct problem, naming the ranks) when a rank runs more threads than its
// mask has cores, or when cores of the node are in no rank's mask, with the
// launcher flag that fixes it (`mpirun --bind-to none`, `--map-by slot:PE=N`,
// `srun --cpus-per-task=N`). log_binding() prints one line per rank:
//   rank 1 (node07, local rank 1): cores 8-15 (8), 8 threads (cores / 1 rank sharing them)
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

#include <string>
#include <vector>

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
  // Intra-op threads per rank: OMP_NUM_THREADS when set, else the cores of
  // this rank's affinity mask divided by the node's ranks sharing them (>= 1).
  int num_threads() const { return num_threads_; }
  // The CPUs this rank may run on, ascending, and as cpulist text ("0-3,8").
  const std::vector<int>& cpus() const { return cpus_; }
  std::string cpu_list() const;
  // Ranks of this node whose affinity masks overlap this rank's (itself included).
  int ranks_sharing_cores() const { return ranks_sharing_cores_; }
  // Rank 0 logs one line per rank: host, local rank, cores, threads (not
  // collective: the lines were gathered at start).
  void log_binding() const;
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
  std::vector<int> cpus_;
  int ranks_sharing_cores_ = 1;
  std::vector<std::string> binding_lines_;  // rank 0 only: one per rank
  bool thread_multiple_ = false;
  MPI_Comm comm_ = MPI_COMM_NULL;
};

}  // namespace shardtrain
