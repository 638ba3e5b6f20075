// Helpers the benchmarks share: wall-clock timing, min / median / max of
// repeated measurements, the slowest rank's value, main()'s body, and the
// registry of the multi-call binary.
//
// Every benchmarks/bench_<name>.cpp is one benchmark, and all of them are one
// executable, build/benchmarks/shardtrain_bench, compiled as a unity build
// (benchmarks/CMakeLists.txt): LibTorch's headers are parsed once per batch of
// files, not once per benchmark. build/benchmarks/bench_<name> is a symbolic
// link to it, and the name it was started by picks the benchmark
// (`shardtrain_bench bench_<name> ARGS` works too). So each file keeps its code
// in `namespace bench_<name>`, with its entry point `int main(int argc, char**
// argv)` there, and ends with SHARDTRAIN_BENCH_REGISTER(bench_<name>).
#pragma once
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shardtrain/comm/world.h"
#include "shardtrain/core/check.h"

namespace shardtrain_bench {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Summary {
  double min = 0, median = 0, max = 0;
};

// Of at least one value; the median of an even count is the mean of the middle two.
inline Summary summarize(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  const double median = values.size() % 2 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
  return {values.front(), median, values.back()};
}

inline nlohmann::json to_json(const Summary& s) { return {{"min", s.min}, {"median", s.median}, {"max", s.max}}; }

// The element-wise maximum over ranks: a step is as slow as its slowest rank.
inline std::vector<double> max_over_ranks(std::vector<double> values, MPI_Comm comm) {
  ST_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE, MPI_MAX, comm));
  return values;
}

// The body of a benchmark's main(): the World first, then run(world, argc,
// argv); a shardtrain::Error (bad flags, files) is printed once as
// "<name>: message" and exits with status 2.
template <class Run>
int bench_main(const char* name, int argc, char** argv, Run run) {
  shardtrain::World world(&argc, &argv);
  try {
    return run(world, argc, argv);
  } catch (const shardtrain::Error& e) {
    if (world.rank() == 0) std::fprintf(stderr, "%s: %s\n", name, e.what());
    return 2;
  }
}

// The benchmarks of the multi-call binary, by name (benchmarks/bench_main.cpp).
using BenchEntry = int (*)(int argc, char** argv);
inline std::map<std::string, BenchEntry>& registry() {
  static std::map<std::string, BenchEntry> benchmarks;
  return benchmarks;
}
inline bool register_bench(const char* name, BenchEntry entry) {
  registry()[name] = entry;
  return true;
}

}  // namespace shardtrain_bench

// At the end of benchmarks/bench_<name>.cpp, outside its namespace.
#define SHARDTRAIN_BENCH_REGISTER(name) \
  static const bool name##_registered = ::shardtrain_bench::register_bench(#name, &name::main);
