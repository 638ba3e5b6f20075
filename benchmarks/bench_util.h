// Helpers the benchmarks share: wall-clock timing, min / median / max of
// repeated measurements, the slowest rank's value, and main().
#pragma once
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
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

}  // namespace shardtrain_bench
