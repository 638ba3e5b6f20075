// AdamW step on a BERT-base-sized flat buffer (bert-base-cased + 2-label
// classifier: 108,311,810 fp32 parameters), one process:
//   fused   the hand-fused CPU loop (AdamW::Kernel::kFusedCpu)
//   aten    in-place ATen ops (AdamW::Kernel::kAtenOps, the CUDA path)
// Before timing, both kernels run the same steps from the same state and must
// agree within 1e-6 relative (they differ only by torch's FMA rounding, see
// optim/adamw.h). Each kernel is warmed up, then timed over --steps steps;
// min/median/max ms per step printed, and written as JSON with --json FILE.
//
// Memory traffic per parameter and step, counted for the fused loop (the
// minimum any AdamW needs): reads p, g, m, v (16 bytes) + writes p, m, v (12
// bytes) = 28 bytes; GB/s = 28 * numel / seconds / 1e9. The ATen path moves
// more (about 12 passes over the buffers plus a temporary denom), but its GB/s
// is reported with the same 28-byte count so the two numbers compare as speed.
//
//   bench_optim [--numel N] [--steps 10] [--warmup 2] [--threads T] [--json FILE]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "shardtrain/optim/adamw.h"
#include "bench_util.h"

namespace bench_optim {  // every benchmark's code lives in its own namespace: they compile together (benchmarks/CMakeLists.txt)

using namespace shardtrain;

namespace {

struct Summary {
  double min_ms, median_ms, max_ms;
};

Summary summarize(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  return {ms.front(), ms[ms.size() / 2], ms.back()};
}

double max_rel_error(const at::Tensor& a, const at::Tensor& b) {
  const double floor = 1e-3 * b.abs().max().item<double>();
  return ((a.to(at::kDouble) - b.to(at::kDouble)).abs() / b.to(at::kDouble).abs().clamp_min(floor)).max().item<double>();
}

}  // namespace

int main(int argc, char** argv) {
  int64_t numel = 108311810;
  int steps = 10, warmup = 2, threads = 0;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_optim: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--numel") numel = std::stoll(value());
    else if (arg == "--steps") steps = std::stoi(value());
    else if (arg == "--warmup") warmup = std::stoi(value());
    else if (arg == "--threads") threads = std::stoi(value());
    else if (arg == "--json") json_path = value();
    else {
      std::fprintf(stderr, "usage: bench_optim [--numel N] [--steps 10] [--warmup 2] [--threads T] [--json FILE]\n");
      return 2;
    }
  }
  if (steps < 1 || numel < 1) {
    std::fprintf(stderr, "bench_optim: --steps and --numel must be >= 1\n");
    return 2;
  }
  if (threads > 0) at::set_num_threads(threads);

  // Decay ranges shaped like BERT's: 90% of elements decayed, split in many
  // ranges (every bias / LayerNorm weight breaks a range).
  std::vector<ElementRange> decay;
  for (int64_t begin = 0; begin < numel; begin += 1 << 20)
    decay.push_back({begin, std::min(numel, begin + (1 << 20) - (1 << 17))});

  auto gen = at::detail::createCPUGenerator(42);
  const at::Tensor initial = at::randn({numel}, gen, at::TensorOptions().dtype(at::kFloat));
  const at::Tensor grads = at::randn({numel}, gen, at::TensorOptions().dtype(at::kFloat)).mul_(1e-3);
  AdamWOptions options;
  options.lr = 2e-5;

  // Check: both kernels, same 3 steps, agree.
  {
    AdamW fused(numel, options), aten(numel, options);
    fused.set_kernel(AdamW::Kernel::kFusedCpu);
    aten.set_kernel(AdamW::Kernel::kAtenOps);
    at::Tensor p_fused = initial.clone(), p_aten = initial.clone();
    for (int s = 0; s < 3; ++s) {
      fused.step(p_fused, grads, decay, options.lr);
      aten.step(p_aten, grads, decay, options.lr);
    }
    const double err_p = max_rel_error(p_aten, p_fused), err_v = max_rel_error(aten.exp_avg_sq(), fused.exp_avg_sq());
    std::printf("check: fused vs aten after 3 steps: max rel err params %.2e, exp_avg_sq %.2e\n", err_p, err_v);
    if (!(err_p <= 1e-6 && err_v <= 1e-6)) {
      std::fprintf(stderr, "bench_optim: CHECK FAILED (limit 1e-6)\n");
      return 1;
    }
  }

  std::printf("AdamW step, %lld fp32 params, %d threads, %d warmup + %d timed steps\n",
              static_cast<long long>(numel), at::get_num_threads(), warmup, steps);
  const double bytes = 28.0 * static_cast<double>(numel);
  nlohmann::json results = nlohmann::json::object();
  for (AdamW::Kernel kernel : {AdamW::Kernel::kFusedCpu, AdamW::Kernel::kAtenOps}) {
    const char* name = kernel == AdamW::Kernel::kFusedCpu ? "fused" : "aten";
    AdamW adamw(numel, options);
    adamw.set_kernel(kernel);
    at::Tensor params = initial.clone();
    std::vector<double> ms;
    for (int s = 0; s < warmup + steps; ++s) {
      const auto t0 = std::chrono::steady_clock::now();
      adamw.step(params, grads, decay, options.lr);
      const auto t1 = std::chrono::steady_clock::now();
      if (s >= warmup) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    const Summary sum = summarize(ms);
    const double gb_per_s = bytes / (sum.median_ms * 1e-3) / 1e9;
    std::printf("  %-6s ms/step  min %8.2f  median %8.2f  max %8.2f   %6.2f GB/s (28 B/param at the median)\n", name,
                sum.min_ms, sum.median_ms, sum.max_ms, gb_per_s);
    results[name] = {{"ms_per_step", {{"min", sum.min_ms}, {"median", sum.median_ms}, {"max", sum.max_ms}}},
                     {"gb_per_s_median", gb_per_s}};
  }
  if (!json_path.empty()) {
    const nlohmann::json out = {{"benchmark", "bench_optim"},
                                {"numel", numel},
                                {"threads", at::get_num_threads()},
                                {"warmup", warmup},
                                {"steps", steps},
                                {"bytes_per_param", 28},
                                {"check", "fused vs aten within 1e-6 relative after 3 steps"},
                                {"results", results}};
    std::ofstream(json_path) << out.dump(2) << "\n";
  }
  return 0;
}

}  // namespace bench_optim

SHARDTRAIN_BENCH_REGISTER(bench_optim)
