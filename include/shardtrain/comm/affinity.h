// Affinity: the cores a rank may run on, and how many compute threads it uses.
//
// Launchers pin ranks. Open MPI binds each rank to ONE core when it starts two
// ranks or fewer (to a socket or NUMA domain above that); Slurm binds each task
// to its --cpus-per-task cores. A rank that runs more threads than its
// affinity mask holds time-slices them on the same cores: `mpirun -np 1
// -x OMP_NUM_THREADS=2` on a 2-core machine trains at half speed and says
// nothing. World (world.h) reads the mask at start (sched_getaffinity), picks
// the thread count with decide_threads() and warns with the launcher fix:
//
//   mpirun --bind-to none ...             threads follow the OS scheduler
//   mpirun --map-by slot:PE=N ...         N cores per rank (Open MPI)
//   srun --cpus-per-task=N ...            N cores per task (Slurm)
//
// The pieces are pure functions so that tests can drive them with any mask:
//
//   std::vector<int> cpus = affinity_cpus();            // e.g. {0, 1}
//   format_cpu_list(cpus);                              // "0-1" (Linux cpulist syntax)
//   ThreadDecision d = decide_threads(std::getenv("OMP_NUM_THREADS"), cpus.size(), ranks_sharing);
//   if (!d.warning.empty()) log_warn("%s", d.warning.c_str());
#pragma once

#include <string>
#include <vector>

namespace shardtrain {

// The CPUs this process may run on (sched_getaffinity), ascending. Falls back
// to 0..hardware_concurrency-1 when the mask cannot be read.
std::vector<int> affinity_cpus();

// The CPUs this node offers this job: the cgroup's effective cpuset (v2
// cpuset.cpus.effective, v1 cpuset.effective_cpus) when readable, else the
// online CPUs. A container or Slurm cgroup that allows cores 0-3 of a 64-core
// host gives {0, 1, 2, 3}.
std::vector<int> node_cpus();

// "0-3,8,10-11" for {0, 1, 2, 3, 8, 10, 11}; "" for none. The input need not be
// sorted; duplicates are ignored.
std::string format_cpu_list(const std::vector<int>& cpus);
// The inverse, for Linux cpulist text ("0-3,8", whitespace and a trailing
// newline allowed, as in /sys and /proc). Throws shardtrain::Error naming the
// text for anything else.
std::vector<int> parse_cpu_list(const std::string& text);

// How many of `masks` (the masks of the ranks on one node) share at least one
// CPU with masks[self]; counts self. 1 when each rank has cores of its own.
int ranks_sharing_cores(const std::vector<std::vector<int>>& masks, int self);

struct ThreadDecision {
  int num_threads = 1;
  bool from_env = false;  // OMP_NUM_THREADS was a positive integer and was used
  // Empty, or one line saying what is wrong and which launcher flag fixes it.
  std::string warning;
};

// The compute threads of one rank.
//   omp_num_threads  the OMP_NUM_THREADS text, nullptr when unset. Its first
//                    entry counts ("4,2" is 4, as OpenMP reads it); a value
//                    that is not a positive integer is ignored, with a warning.
//   num_cores        CPUs in this rank's affinity mask (>= 1).
//   ranks_sharing    ranks of the node whose masks overlap this rank's,
//                    itself included (>= 1), from ranks_sharing_cores().
// Without OMP_NUM_THREADS: num_cores / ranks_sharing, at least 1. With it: its
// value, and a warning when it exceeds num_cores (the threads time-share the
// mask's cores) or when the sharing ranks' threads together exceed num_cores.
ThreadDecision decide_threads(const char* omp_num_threads, int num_cores, int ranks_sharing);

}  // namespace shardtrain
