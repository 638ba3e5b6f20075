// Affinity masks and the thread decision (comm/affinity.h) as pure functions:
// cpulist text both ways, ranks sharing cores, and the thread count and
// warning for each launch pattern. tests/CMakeLists.txt also runs
// affinity_probe under real bindings (mpirun --bind-to core, taskset).
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "shardtrain/comm/affinity.h"
#include "shardtrain/core/check.h"

using namespace shardtrain;

TEST_CASE("cpulist text: format and parse both ways") {
  CHECK(format_cpu_list({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11");
  CHECK(format_cpu_list({5, 3, 4, 4}) == "3-5");
  CHECK(format_cpu_list({7}) == "7");
  CHECK(format_cpu_list({}).empty());
  CHECK(parse_cpu_list("0-3,8,10-11\n") == std::vector<int>{0, 1, 2, 3, 8, 10, 11});
  CHECK(parse_cpu_list(" 2 ") == std::vector<int>{2});
  CHECK(parse_cpu_list("").empty());
  CHECK(parse_cpu_list(format_cpu_list({1, 4, 5, 6, 63})) == std::vector<int>{1, 4, 5, 6, 63});
  for (const char* bad : {"a", "1-", "3-1", "1,,2", "1,", "-2", "0x3"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(parse_cpu_list(bad), doctest::Contains("cpu list \""), Error);
  }
}

TEST_CASE("this process's mask is readable and inside the node's cpus") {
  const std::vector<int> mine = affinity_cpus();
  const std::vector<int> node = node_cpus();
  REQUIRE(!mine.empty());
  REQUIRE(!node.empty());
  for (int cpu : mine) CHECK(std::find(node.begin(), node.end(), cpu) != node.end());
}

TEST_CASE("ranks sharing cores: overlapping masks count, disjoint ones do not") {
  // mpirun --bind-to none -np 2: both ranks may use both cores.
  CHECK(ranks_sharing_cores({{0, 1}, {0, 1}}, 0) == 2);
  // Open MPI's default at -np 2: a core each.
  CHECK(ranks_sharing_cores({{0}, {1}}, 1) == 1);
  // srun --cpus-per-task=4 with 2 tasks, and an odd overlap.
  CHECK(ranks_sharing_cores({{0, 1, 2, 3}, {4, 5, 6, 7}}, 0) == 1);
  CHECK(ranks_sharing_cores({{0, 1, 2}, {2, 3}, {4}}, 0) == 2);
  CHECK(ranks_sharing_cores({{0, 1, 2}, {2, 3}, {4}}, 2) == 1);
}

TEST_CASE("thread decision: from the mask without OMP_NUM_THREADS, warned when it oversubscribes") {
  // No OMP_NUM_THREADS: the mask's cores over the ranks sharing them.
  ThreadDecision d = decide_threads(nullptr, 16, 1);
  CHECK(d.num_threads == 16);
  CHECK_FALSE(d.from_env);
  CHECK(d.warning.empty());
  CHECK(decide_threads(nullptr, 16, 4).num_threads == 4);
  CHECK(decide_threads(nullptr, 2, 4).num_threads == 1);  // more ranks than cores: one thread each
  CHECK(decide_threads(nullptr, 1, 1).num_threads == 1);

  // The trap: mpirun -np 1 -x OMP_NUM_THREADS=2 binds the rank to one core.
  d = decide_threads("2", 1, 1);
  CHECK(d.num_threads == 2);  // the user's value is kept, and flagged
  CHECK(d.from_env);
  CHECK(d.warning.find("OMP_NUM_THREADS=2 but this rank may run on 1 core(s)") != std::string::npos);
  CHECK(d.warning.find("`mpirun --bind-to none`") != std::string::npos);
  CHECK(d.warning.find("`mpirun --map-by slot:PE=2`") != std::string::npos);
  CHECK(d.warning.find("`srun --cpus-per-task=2`") != std::string::npos);

  // Fits: no warning. 16 threads on 16 cores; 1 thread each for 2 ranks on 2 shared cores.
  CHECK(decide_threads("16", 16, 1).warning.empty());
  CHECK(decide_threads("1", 2, 2).warning.empty());
  CHECK(decide_threads("1", 2, 4).warning.empty());  // oversubscribed by ranks: no thread setting fixes that

  // --bind-to none, 2 ranks x 2 threads on 2 shared cores: 4 threads on 2 cores.
  d = decide_threads("2", 2, 2);
  CHECK(d.num_threads == 2);
  CHECK(d.warning.find("2 ranks share this rank's 2 core(s), each with OMP_NUM_THREADS=2: 4 threads on 2 cores") !=
        std::string::npos);
  CHECK(d.warning.find("Set OMP_NUM_THREADS=1") != std::string::npos);

  // OpenMP's nested list: the first entry counts; junk is ignored with a warning.
  CHECK(decide_threads("4,2", 8, 1).num_threads == 4);
  for (const char* junk : {"", "zero", "0", "-3"}) {
    CAPTURE(junk);
    d = decide_threads(junk, 6, 2);
    CHECK(d.num_threads == 3);
    CHECK_FALSE(d.from_env);
    CHECK(d.warning.find("is not a positive integer and is ignored") != std::string::npos);
  }
}
