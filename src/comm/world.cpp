#include "shardtrain/comm/world.h"

#include <ATen/Parallel.h>
#include <sched.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>

#include "shardtrain/comm/affinity.h"
#include "shardtrain/comm/watchdog.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain {
namespace {

// Every rank's `local` vector, in rank order (collective over `comm`).
std::vector<std::vector<int>> allgather_ints(const std::vector<int>& local, MPI_Comm comm) {
  int size = 1;
  ST_CHECK_MPI(MPI_Comm_size(comm, &size));
  int count = static_cast<int>(local.size());
  std::vector<int> counts(static_cast<size_t>(size)), offsets(static_cast<size_t>(size), 0);
  ST_CHECK_MPI(MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, comm));
  for (int r = 1; r < size; ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
  std::vector<int> all(static_cast<size_t>(offsets.back() + counts.back()));
  ST_CHECK_MPI(MPI_Allgatherv(local.data(), count, MPI_INT, all.data(), counts.data(), offsets.data(), MPI_INT, comm));
  std::vector<std::vector<int>> out(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) out[r].assign(all.begin() + offsets[r], all.begin() + offsets[r] + counts[r]);
  return out;
}

// Every rank's `text` on rank 0, in rank order; empty elsewhere (collective).
std::vector<std::string> gather_strings(const std::string& text, MPI_Comm comm) {
  int rank = 0, size = 1;
  ST_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  ST_CHECK_MPI(MPI_Comm_size(comm, &size));
  int length = static_cast<int>(text.size());
  std::vector<int> lengths(static_cast<size_t>(size)), offsets(static_cast<size_t>(size), 0);
  ST_CHECK_MPI(MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, comm));
  for (int r = 1; r < size; ++r) offsets[r] = offsets[r - 1] + lengths[r - 1];
  std::string all(rank == 0 ? static_cast<size_t>(offsets.back() + lengths.back()) : 0, '\0');
  ST_CHECK_MPI(MPI_Gatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, 0,
                           comm));
  std::vector<std::string> out;
  if (rank == 0)
    for (int r = 0; r < size; ++r) out.push_back(all.substr(offsets[r], lengths[r]));
  return out;
}

std::string processor_name() {
  char name[MPI_MAX_PROCESSOR_NAME] = {0};
  int length = 0;
  ST_CHECK_MPI(MPI_Get_processor_name(name, &length));
  return std::string(name, static_cast<size_t>(std::max(length, 0)));
}

// Cores of the node that no rank of it may run on (the first launch trap:
// `mpirun -np 1` binds its one rank to one core of many). Under Slurm the
// allocation, not the node, is what the job owns, so Slurm jobs are skipped.
std::string idle_cores_warning(const std::vector<std::vector<int>>& node_masks) {
  if (std::getenv("SLURM_JOB_ID") != nullptr) return {};
  std::set<int> used;
  for (const auto& mask : node_masks) used.insert(mask.begin(), mask.end());
  const std::vector<int> offered = node_cpus();
  std::vector<int> idle;
  for (int cpu : offered)
    if (!used.count(cpu)) idle.push_back(cpu);
  if (idle.empty()) return {};
  const int ranks = static_cast<int>(node_masks.size());
  const int per_rank = std::max(1, static_cast<int>(offered.size()) / ranks);
  return str_format("cores %s of this node (%zu of %zu) are in no rank's affinity mask and stay idle: the launcher "
                    "bound the %d rank(s) here to core(s) %s. Launch with `mpirun --bind-to none`, or `mpirun "
                    "--map-by slot:PE=%d` (%d cores per rank)",
                    format_cpu_list(idle).c_str(), idle.size(), offered.size(), ranks,
                    format_cpu_list(std::vector<int>(used.begin(), used.end())).c_str(), per_rank, per_rank);
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

// A process started without a launcher (`shardtrain --help`, `inspect`, a unit
// test) is an MPI singleton. Open MPI 4 then forks and connects an orted for
// it, about 0.3 s of the start; an isolated singleton skips that daemon, which
// only MPI_Comm_spawn needs (shardtrain never spawns). A value the user set
// stays; under mpirun, srun or any other launcher the setting is not read.
void isolated_singleton() { setenv("OMPI_MCA_ess_singleton_isolated", "1", /*overwrite=*/0); }

}  // namespace

World::World(int* argc, char*** argv) {
  keep_freed_memory();
  isolated_singleton();
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

  // ---- threads from the affinity masks (comm/affinity.h) ----
  cpus_ = affinity_cpus();
  const std::vector<std::vector<int>> node_masks = allgather_ints(cpus_, node_comm);
  ranks_sharing_cores_ = shardtrain::ranks_sharing_cores(node_masks, local_rank_);
  const char* omp = std::getenv("OMP_NUM_THREADS");
  const ThreadDecision threads = decide_threads(omp, static_cast<int>(cpus_.size()), ranks_sharing_cores_);
  num_threads_ = threads.num_threads;
  at::set_num_threads(num_threads_);
  const std::string idle = local_rank_ == 0 ? idle_cores_warning(node_masks) : std::string();
  ST_CHECK_MPI(MPI_Comm_free(&node_comm));

  // One line per rank for log_binding(), and each distinct warning printed
  // once by rank 0, with the ranks it concerns and where the first of them runs.
  const std::string where = processor_name() + ", cores " + cpu_list();
  const std::string line = str_format(
      "rank %d (%s, local rank %d): cores %s (%zu), %d thread(s) (%s)", rank_, processor_name().c_str(), local_rank_,
      cpu_list().c_str(), cpus_.size(), num_threads_,
      threads.from_env ? "OMP_NUM_THREADS"
                       : str_format("cores / %d rank(s) sharing them", ranks_sharing_cores_).c_str());
  binding_lines_ = gather_strings(line, comm_);
  const std::vector<std::string> places = gather_strings(where, comm_);
  const std::vector<std::string> warnings = gather_strings(threads.warning, comm_);
  const std::vector<std::string> idle_warnings = gather_strings(idle, comm_);
  if (rank_ == 0) {
    std::map<std::string, std::vector<int>> by_text;
    for (int r = 0; r < size_; ++r)
      if (!warnings[r].empty()) by_text[warnings[r]].push_back(r);
    for (const auto& [text, ranks] : by_text)
      // format_cpu_list writes ranks as ranges too: "0-2,5".
      log_warn("rank(s) %s (rank %d on %s): %s", format_cpu_list(ranks).c_str(), ranks.front(),
               places[ranks.front()].c_str(), text.c_str());
    for (int r = 0; r < size_; ++r)
      if (!idle_warnings[r].empty()) log_warn("%s: %s", places[r].substr(0, places[r].find(',')).c_str(),
                                              idle_warnings[r].c_str());
  }
}

std::string World::cpu_list() const { return format_cpu_list(cpus_); }

void World::log_binding() const {
  for (const std::string& line : binding_lines_) log_info("%s", line.c_str());
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
