// Collective bandwidth through the Communicator interface, in the manner of
// NVIDIA/nccl-tests: for each operation and each buffer size from --min-bytes
// to --max-bytes (times --factor), every rank fills its input with small
// integers whose result is exactly predictable, runs the collective once and
// checks every element (the job aborts with the first wrong element otherwise),
// warms up, then times --iters runs. Each timed run starts after a barrier and
// its time is the slowest rank's; rank 0 prints min/median/max per size and
//   algbw = bytes / median time
//   busbw = algbw * factor, factor = all_reduce 2(n-1)/n, reduce_scatter and
//           all_gather (n-1)/n, broadcast 1   (nccl-tests' bus bandwidth)
// where `bytes` is the full buffer: the all_reduce/broadcast tensor, the
// reduce_scatter input, the all_gather output (as nccl-tests count them).
//
//   mpirun -np N bench_collectives [--backend mpi|nccl] [--min-bytes 1K] [--max-bytes 256M]
//       [--factor 2] [--iters 20] [--warmup 5] [--dtype float|bfloat16|float16]
//       [--ops all_reduce,reduce_scatter,all_gather,broadcast] [--json FILE]
//
// The nccl backend needs a build with NCCL and one GPU per rank on each node.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "shardtrain/comm/mpi_communicator.h"
#include "shardtrain/comm/world.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#if SHARDTRAIN_HAVE_NCCL
#include "shardtrain/comm/nccl_communicator.h"
#include "bench_util.h"
#endif

namespace bench_collectives {  // every benchmark's code lives in its own namespace: they compile together (benchmarks/CMakeLists.txt)

using namespace shardtrain;

namespace {

constexpr int64_t kPeriod = 13;  // inputs repeat with this period: values stay below 13 * ranks

// "1K", "256M", "1G" (binary multiples) or a plain byte count.
int64_t parse_bytes(const std::string& text, const char* flag) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    throw Error(str_format("%s: '%s' is not a size (examples: 4096, 1K, 256M, 1G)", flag, text.c_str()));
  }
  const std::string suffix = text.substr(used);
  double scale = 1;
  if (suffix == "K" || suffix == "k") scale = 1024.0;
  else if (suffix == "M" || suffix == "m") scale = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "g") scale = 1024.0 * 1024 * 1024;
  else if (!suffix.empty() && suffix != "B")
    throw Error(str_format("%s: unknown suffix '%s' in '%s' (use K, M or G)", flag, suffix.c_str(), text.c_str()));
  if (value <= 0) throw Error(str_format("%s: size must be positive, got '%s'", flag, text.c_str()));
  return static_cast<int64_t>(value * scale);
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

// Rank r's element i: (i + 3 r) % 13, a small integer exact in every dtype.
at::Tensor pattern(int64_t n, int rank, at::ScalarType dtype) {
  at::Tensor period = (at::arange(kPeriod, at::kLong) + 3 * rank).remainder(kPeriod).to(dtype);
  return period.repeat({(n + kPeriod - 1) / kPeriod}).narrow(0, 0, n).contiguous();
}

// Sum over all ranks of pattern(n, r): periodic too, so build one period.
at::Tensor pattern_sum(int64_t n, int ranks, at::ScalarType dtype) {
  at::Tensor period = at::zeros({kPeriod}, at::kLong);
  for (int r = 0; r < ranks; ++r) period += (at::arange(kPeriod, at::kLong) + 3 * r).remainder(kPeriod);
  return period.to(dtype).repeat({(n + kPeriod - 1) / kPeriod}).narrow(0, 0, n).contiguous();
}

// Moves tensors between the host and where the backend wants them.
struct Placement {
  bool gpu = false;
  int device = 0;
  at::Tensor put(const at::Tensor& host) const {
#if SHARDTRAIN_HAVE_NCCL
    if (gpu) return copy_to_device(host, device);
#endif
    return host;
  }
  at::Tensor get(const at::Tensor& t) const {
#if SHARDTRAIN_HAVE_NCCL
    if (gpu) return copy_to_host(t);
#endif
    return t;
  }
};

// Aborts the job, naming the first wrong element.
void check_equal(const at::Tensor& actual, const at::Tensor& expected, const std::string& what, int rank) {
  // Compared as float32: exact for these small integers, and supported for every dtype.
  if (at::equal(actual.to(at::kFloat), expected.to(at::kFloat))) return;
  at::Tensor wrong = (actual.to(at::kDouble) != expected.to(at::kDouble)).nonzero();
  const int64_t index = wrong.numel() > 0 ? wrong[0][0].item<int64_t>() : -1;
  fatal("bench_collectives", __FILE__, __LINE__,
        str_format("%s: wrong result on rank %d: element %lld is %g, expected %g (%lld wrong elements)",
                   what.c_str(), rank, static_cast<long long>(index),
                   index >= 0 ? actual[index].item<double>() : 0.0,
                   index >= 0 ? expected[index].item<double>() : 0.0, static_cast<long long>(wrong.size(0))));
}

struct Row {
  std::string op;
  int64_t bytes = 0;
  int64_t count = 0;  // elements of the full buffer
  double min_us = 0, median_us = 0, max_us = 0;
  double algbw = 0, busbw = 0;  // GB/s (1e9 bytes per second)
};

double bus_factor(const std::string& op, int n) {
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "broadcast") return 1.0;
  return static_cast<double>(n - 1) / n;  // reduce_scatter, all_gather
}

// One collective of one size: set up, check, warm up, time.
Row run_one(Communicator& comm, const Placement& place, const std::string& op, int64_t bytes,
            at::ScalarType dtype, int iters, int warmup) {
  const int n = comm.size();
  const int r = comm.rank();
  const int64_t element = static_cast<int64_t>(c10::elementSize(dtype));
  // The full buffer holds a multiple of n elements, so every rank's chunk is equal.
  const int64_t count = std::max<int64_t>(n, bytes / element / n * n);
  const int64_t chunk = count / n;
  const std::string what = str_format("%s of %lld bytes", op.c_str(), static_cast<long long>(count * element));

  at::Tensor buffer, input, output;
  std::function<std::unique_ptr<Work>()> launch;
  std::function<void()> check;
  if (op == "all_reduce") {
    buffer = place.put(pattern(count, r, dtype));
    launch = [&] { return comm.all_reduce_async(buffer, ReduceOp::kSum); };
    check = [&] { check_equal(place.get(buffer), pattern_sum(count, n, dtype), what, r); };
  } else if (op == "reduce_scatter") {
    input = place.put(pattern(count, r, dtype));
    output = place.put(at::full({chunk}, -1, at::TensorOptions().dtype(dtype)));
    launch = [&] { return comm.reduce_scatter_async(input, output, ReduceOp::kSum); };
    check = [&] {
      check_equal(place.get(output), pattern_sum(count, n, dtype).narrow(0, r * chunk, chunk).contiguous(), what, r);
    };
  } else if (op == "all_gather") {
    input = place.put(pattern(chunk, r, dtype));
    output = place.put(at::full({count}, -1, at::TensorOptions().dtype(dtype)));
    launch = [&] { return comm.all_gather_async(input, output); };
    check = [&] {
      at::Tensor got = place.get(output);
      for (int q = 0; q < n; ++q)
        check_equal(got.narrow(0, q * chunk, chunk).contiguous(), pattern(chunk, q, dtype), what, r);
    };
  } else {  // broadcast from rank 0
    buffer = place.put(pattern(count, r, dtype));
    launch = [&] { return comm.broadcast_async(buffer, 0); };
    check = [&] { check_equal(place.get(buffer), pattern(count, 0, dtype), what, r); };
  }

  launch()->wait();
  check();
  for (int i = 0; i < warmup; ++i) launch()->wait();

  std::vector<double> seconds(static_cast<size_t>(iters));
  for (int i = 0; i < iters; ++i) {
    comm.barrier();
    const auto start = std::chrono::steady_clock::now();
    launch()->wait();
    seconds[static_cast<size_t>(i)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  // A collective is as slow as its slowest rank.
  std::vector<double> slowest = seconds;
  ST_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, slowest.data(), iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  std::sort(slowest.begin(), slowest.end());

  Row row;
  row.op = op;
  row.bytes = count * element;
  row.count = count;
  row.min_us = slowest.front() * 1e6;
  row.max_us = slowest.back() * 1e6;
  const size_t mid = slowest.size() / 2;
  const double median = slowest.size() % 2 ? slowest[mid] : 0.5 * (slowest[mid - 1] + slowest[mid]);
  row.median_us = median * 1e6;
  row.algbw = static_cast<double>(row.bytes) / median / 1e9;
  row.busbw = row.algbw * bus_factor(op, n);
  return row;
}

int run(World& world, int argc, char** argv) {
  CLI::App app{"Collective bandwidth through shardtrain's Communicator (nccl-tests style)"};
  std::string backend = "mpi", min_text = "1K", max_text = "256M", dtype_text = "float", json_path;
  std::string ops_text = "all_reduce,reduce_scatter,all_gather,broadcast";
  int factor = 2, iters = 20, warmup = 5;
  app.add_option("--backend", backend, "mpi (CPU tensors) or nccl (CUDA tensors)")
      ->check(CLI::IsMember({"mpi", "nccl"}));
  app.add_option("--min-bytes", min_text, "smallest buffer (K, M, G suffixes)");
  app.add_option("--max-bytes", max_text, "largest buffer (K, M, G suffixes)");
  app.add_option("--factor", factor, "size multiplier between steps")->check(CLI::Range(2, 1024));
  app.add_option("--iters", iters, "timed runs per size")->check(CLI::Range(1, 1000000));
  app.add_option("--warmup", warmup, "untimed runs per size")->check(CLI::Range(0, 1000000));
  app.add_option("--dtype", dtype_text, "element type")->check(CLI::IsMember({"float", "bfloat16", "float16"}));
  app.add_option("--ops", ops_text, "comma-separated: all_reduce,reduce_scatter,all_gather,broadcast");
  app.add_option("--json", json_path, "write the results here (rank 0)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (world.rank() == 0) return app.exit(e);
    return e.get_exit_code();
  }

  const int64_t min_bytes = parse_bytes(min_text, "--min-bytes");
  const int64_t max_bytes = parse_bytes(max_text, "--max-bytes");
  if (min_bytes > max_bytes)
    throw Error(str_format("--min-bytes %s is larger than --max-bytes %s", min_text.c_str(), max_text.c_str()));
  const std::vector<std::string> ops = split_list(ops_text);
  for (const auto& op : ops)
    if (op != "all_reduce" && op != "reduce_scatter" && op != "all_gather" && op != "broadcast")
      throw Error("--ops: unknown operation '" + op + "' (all_reduce, reduce_scatter, all_gather, broadcast)");
  const at::ScalarType dtype =
      dtype_text == "bfloat16" ? at::kBFloat16 : dtype_text == "float16" ? at::kHalf : at::kFloat;

  at::set_num_threads(world.num_threads());
  std::unique_ptr<Communicator> comm;
  Placement place;
  if (backend == "nccl") {
#if SHARDTRAIN_HAVE_NCCL
    place.gpu = true;
    place.device = NcclCommunicator::device_for_local_rank(world.local_rank());
    if (world.local_size() > NcclCommunicator::num_visible_devices())
      throw Error(str_format("--backend nccl: %d ranks on this node but %d GPU(s); NCCL needs one GPU per rank",
                             world.local_size(), NcclCommunicator::num_visible_devices()));
    comm = std::make_unique<NcclCommunicator>(world.comm(), place.device);
#else
    throw Error("--backend nccl: this build has no NCCL (configure with CUDA and NCCL found)");
#endif
  } else {
    comm = std::make_unique<MpiCommunicator>(world.comm());
  }
  const int n = comm->size();

  if (world.rank() == 0) {
    std::printf("# bench_collectives: backend %s, %d ranks, dtype %s, %d timed runs after %d warm-up runs\n",
                backend.c_str(), n, dtype_text.c_str(), iters, warmup);
    std::printf("# time = slowest rank per run (barrier before each); algbw = bytes / median time (GB/s = 1e9 B/s)\n");
    std::printf("# busbw = algbw * factor: all_reduce 2(n-1)/n = %.3f, reduce_scatter and all_gather (n-1)/n = %.3f,"
                " broadcast 1\n",
                bus_factor("all_reduce", n), bus_factor("all_gather", n));
    std::printf("# every result was checked element by element before timing\n");
    std::printf("%-15s %12s %11s %11s %11s %11s %10s %10s\n", "op", "bytes", "count", "min_us", "median_us", "max_us",
                "algbw_GB/s", "busbw_GB/s");
    std::fflush(stdout);
  }
  std::vector<Row> rows;
  for (const auto& op : ops) {
    for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= factor) {
      Row row = run_one(*comm, place, op, bytes, dtype, iters, warmup);
      if (world.rank() == 0) {
        std::printf("%-15s %12lld %11lld %11.1f %11.1f %11.1f %10.3f %10.3f\n", row.op.c_str(),
                    static_cast<long long>(row.bytes), static_cast<long long>(row.count), row.min_us, row.median_us,
                    row.max_us, row.algbw, row.busbw);
        std::fflush(stdout);
      }
      rows.push_back(row);
    }
  }

  if (world.rank() == 0 && !json_path.empty()) {
    nlohmann::json results = nlohmann::json::array();
    for (const auto& row : rows)
      results.push_back({{"op", row.op},
                         {"bytes", row.bytes},
                         {"count", row.count},
                         {"time_us", {{"min", row.min_us}, {"median", row.median_us}, {"max", row.max_us}}},
                         {"algbw_GBps", row.algbw},
                         {"busbw_GBps", row.busbw}});
    nlohmann::json doc = {{"benchmark", "bench_collectives"},
                          {"backend", backend},
                          {"ranks", n},
                          {"dtype", dtype_text},
                          {"iters", iters},
                          {"warmup", warmup},
                          {"busbw_factor", {{"all_reduce", "2(n-1)/n"},
                                            {"reduce_scatter", "(n-1)/n"},
                                            {"all_gather", "(n-1)/n"},
                                            {"broadcast", "1"}}},
                          {"results", results}};
    std::ofstream out(json_path);
    if (!out) throw Error("--json: cannot write " + json_path);
    out << doc.dump(2) << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  World world(&argc, &argv);
  try {
    return run(world, argc, argv);
  } catch (const Error& e) {
    if (world.rank() == 0) std::fprintf(stderr, "bench_collectives: %s\n", e.what());
    return 2;
  }
}

}  // namespace bench_collectives

SHARDTRAIN_BENCH_REGISTER(bench_collectives)
