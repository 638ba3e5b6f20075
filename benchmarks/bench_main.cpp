// main() of the multi-call benchmark binary (benchmarks/bench_util.h): the
// benchmark is the name it was started by (build/benchmarks/bench_<name>, a
// symbolic link), or the first argument (`shardtrain_bench bench_<name> ARGS`).
#include <cstdio>
#include <string>

#include "bench_util.h"

int main(int argc, char** argv) {
  const auto& benchmarks = shardtrain_bench::registry();
  std::string self = argc > 0 ? argv[0] : "";
  self = self.substr(self.find_last_of('/') + 1);
  if (auto it = benchmarks.find(self); it != benchmarks.end()) return it->second(argc, argv);
  if (argc > 1)
    if (auto it = benchmarks.find(argv[1]); it != benchmarks.end()) return it->second(argc - 1, argv + 1);
  std::fprintf(stderr, "usage: %s BENCHMARK [ARGS...], or run build/benchmarks/BENCHMARK; benchmarks:\n",
               self.c_str());
  for (const auto& [name, entry] : benchmarks) std::fprintf(stderr, "  %s\n", name.c_str());
  return 2;
}
