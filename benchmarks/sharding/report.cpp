#include "sharding/report.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "shardtrain/core/check.h"
#include "shardtrain/core/cpu_features.h"
#include "shardtrain/core/log.h"
#include "shardtrain/model/task_model.h"

using namespace shardtrain;

namespace shardtrain_bench::sharding {
namespace {

constexpr double kMB = 1024.0 * 1024.0;

}  // namespace

void print_preamble(const Options& options, const EncoderConfig& config, int ranks) {
  const bool mixed = options.mixed_precision != Precision::kNo;
  std::printf("# bench_sharding: model %s (D %lld, layers %lld, heads %lld, I %lld, vocab %lld), Psi = %lld "
              "parameters, %s, AdamW; dropout off\n",
              options.model_name.c_str(), static_cast<long long>(config.hidden_size),
              static_cast<long long>(config.num_hidden_layers), static_cast<long long>(config.num_attention_heads),
              static_cast<long long>(config.intermediate_size), static_cast<long long>(config.vocab_size),
              static_cast<long long>(config.num_parameters()), mixed ? "mixed precision bf16" : "fp32");
  // bf16 rows depend on the CPU (docs/DESIGN.md, "Mixed precision on a CPU").
  std::printf("# CPU features (cpuid): %s\n", current_cpu_features().describe().c_str());
  std::printf("# N = %d ranks x %d threads, batch %lld x seq_len %lld per rank, accumulation 1, %d warm-up + %d "
              "timed steps per strategy\n",
              ranks, at::get_num_threads(), static_cast<long long>(options.batch_size),
              static_cast<long long>(options.seq_len), options.warmup, options.steps);
  std::printf(mixed ? "# ZeRO's mixed-precision 16 bytes/param: 2 params + 2 grads + 12 optimizer (fp32 master + AdamW)\n"
                    : "# fp32 equivalent of ZeRO's 16 bytes/param: 4 params + 4 grads + 8 AdamW (no master copy)\n");
  std::fflush(stdout);
}

void print_strategy_done(const Row& row, const Row* reference) {
  std::printf("# %s done: check passed (warm-up losses and norms%s, parameters bit-identical on all ranks); "
              "step median %.2f s\n",
              row.strategy.c_str(), reference ? (" match " + reference->strategy).c_str() : " finite",
              row.step_s.median);
  std::fflush(stdout);
}

void print_results(const std::vector<Row>& rows, int ranks, bool all_memory_pass) {
  std::printf("\nMemory per rank (max over ranks, MB = 2^20 bytes) and bytes sent per step against the ZeRO "
              "formulas (memory tolerance %.0f%%):\n",
              100 * kMemoryTolerance);
  std::printf("%-8s %3s %9s %9s %9s %9s %11s %7s %6s %10s %12s %12s %7s %4s %9s %9s %11s %9s %7s\n", "strategy",
              "N", "params", "grads", "optim", "total", "ZeRO_MB", "ratio", "mem", "peak_gath", "sent_MB/step",
              "formula_MB", "ratio", "comm", "waiting_s", "blocked_s", "peer_wait_s", "exposed_s", "hidden");
  for (const Row& r : rows) {
    const bool no_comm = r.formula.comm_bytes <= 0;
    const bool comm_ok = no_comm ? r.bytes_sent_per_step == 0 : std::abs(r.comm_ratio - 1.0) <= kMemoryTolerance;
    std::printf("%-8s %3d %9.1f %9.1f %9.1f %9.1f %11.1f %7.4f %6s %10.1f %12.1f %12.1f %7s %4s %9.3f %9.3f %11s %9.3f "
                "%7s\n",
                r.strategy.c_str(), r.ranks, r.memory.param_bytes / kMB, r.memory.grad_bytes / kMB,
                r.memory.optimizer_bytes / kMB, r.memory.total() / kMB, r.formula.memory_bytes / kMB, r.memory_ratio,
                r.memory_pass ? "PASS" : "FAIL", r.memory.peak_transient_bytes / kMB, r.bytes_sent_per_step / kMB,
                r.formula.comm_bytes / kMB, no_comm ? "-" : str_format("%.4f", r.comm_ratio).c_str(),
                comm_ok ? "ok" : "DIFF", r.seconds_waiting_per_step, r.blocked_per_step,
                r.one_node ? str_format("%.3f", r.peer_wait_per_step).c_str() : "-", r.comm_exposed_per_step,
                r.hidden_share < 0 ? "-" : str_format("%.0f%%", 100 * r.hidden_share).c_str());
  }
  std::printf("\nFormulas (Psi = %lld, N = %d):\n", static_cast<long long>(rows.front().counts.psi), ranks);
  for (const Row& r : rows) {
    std::printf("  %-7s G %d  memory %-40s comm %s", r.strategy.c_str(), r.group, r.formula.memory_name.c_str(),
                r.formula.comm_name.c_str());
    if (r.formula.persistent_bytes > 0)
      std::printf("  (Psi_pers = %lld elements = %.2f MB replicated)",
                  static_cast<long long>(r.counts.psi_persistent), r.formula.persistent_bytes / kMB);
    std::printf("\n");
  }
  std::printf("\nPer step (timed steps; step time = slowest rank):\n");
  std::printf("%-8s %10s %10s %10s %11s %9s %11s %9s %9s %13s %14s\n", "strategy", "step_min_s", "step_med_s",
              "step_max_s", "collectives", "gathers", "prefetched", "reduces", "in_bwd", "comm_alone_s",
              "largest_unit_MB");
  for (const Row& r : rows)
    std::printf("%-8s %10.3f %10.3f %10.3f %11lld %9.1f %11.1f %9.1f %9.1f %13.3f %14.1f\n", r.strategy.c_str(),
                r.step_s.min, r.step_s.median, r.step_s.max, static_cast<long long>(r.collectives_per_step),
                r.gathers_per_step, r.prefetched_per_step, r.reductions_per_step, r.reductions_in_backward_per_step,
                r.comm_alone_per_step, 4.0 * static_cast<double>(r.counts.largest_unit) / kMB);
  // stats().bytes_sent must be exactly what the strategy put through its communicators.
  for (const Row& r : rows)
    if (std::llround(r.bytes_sent_per_step) != std::llround(r.logged_bytes_per_step))
      std::printf("WARNING %s: stats().bytes_sent counts %.0f bytes/step, its collectives sent %.0f bytes/step\n",
                  r.strategy.c_str(), r.bytes_sent_per_step, r.logged_bytes_per_step);
  std::printf("\nmemory: %s\n", all_memory_pass ? "every strategy within 5% of its ZeRO formula"
                                                : "FAIL: some strategy is more than 5% off its ZeRO formula");
  std::fflush(stdout);
}

void write_json(const std::string& path, const std::vector<Row>& rows, const Options& options,
                const EncoderConfig& config, int ranks, bool all_memory_pass) {
  nlohmann::json out_rows = nlohmann::json::array();
  for (const Row& r : rows) {
    out_rows.push_back(
        {{"strategy", r.strategy},
         {"ranks", r.ranks},
         {"shard_group", r.group},
         {"memory_bytes",
          {{"params", r.memory.param_bytes},
           {"grads", r.memory.grad_bytes},
           {"optimizer", r.memory.optimizer_bytes},
           {"total", r.memory.total()},
           {"peak_transient", r.memory.peak_transient_bytes}}},
         {"memory_formula", r.formula.memory_name},
         {"memory_formula_bytes", r.formula.memory_bytes},
         {"memory_persistent_bytes", r.formula.persistent_bytes},
         {"memory_ratio", r.memory_ratio},
         {"memory_pass", r.memory_pass},
         {"bytes_sent_per_step", r.bytes_sent_per_step},
         {"collective_bytes_per_step", r.logged_bytes_per_step},
         {"comm_formula", r.formula.comm_name},
         {"comm_formula_bytes", r.formula.comm_bytes},
         {"comm_ratio", r.comm_ratio},
         {"seconds_waiting_per_step", r.seconds_waiting_per_step},
         {"seconds_blocked_per_step", r.blocked_per_step},
         {"comm_alone_seconds_per_step", r.comm_alone_per_step},
         {"peer_wait_seconds_per_step", r.one_node ? nlohmann::json(r.peer_wait_per_step) : nlohmann::json(nullptr)},
         {"comm_exposed_seconds_per_step", r.comm_exposed_per_step},
         {"hidden_share", r.hidden_share < 0 ? nlohmann::json(nullptr) : nlohmann::json(r.hidden_share)},
         {"collectives_per_step", r.collectives_per_step},
         {"gathers_per_step", r.gathers_per_step},
         {"gathers_prefetched_per_step", r.prefetched_per_step},
         {"reductions_per_step", r.reductions_per_step},
         {"reductions_during_backward_per_step", r.reductions_in_backward_per_step},
         {"largest_unit_params", r.counts.largest_unit},
         {"persistent_params", r.counts.psi_persistent},
         {"step_s", to_json(r.step_s)},
         {"warmup_losses_rank0", r.warmup_losses},
         {"warmup_grad_norms", r.warmup_norms}});
  }
  nlohmann::json doc = {{"benchmark", "bench_sharding"},
                        {"model", options.model_name},
                        {"num_parameters", config.num_parameters()},
                        {"ranks", ranks},
                        {"threads_per_rank", at::get_num_threads()},
                        {"batch_size_per_rank", options.batch_size},
                        {"seq_len", options.seq_len},
                        {"gradient_accumulation_steps", 1},
                        {"warmup", options.warmup},
                        {"steps", options.steps},
                        {"bytes_per_param", {{"params", 4}, {"grads", 4}, {"adamw", 8}}},
                        {"memory_tolerance", kMemoryTolerance},
                        {"memory_pass", all_memory_pass},
                        {"rows", out_rows}};
  std::ofstream out(path);
  if (!out) throw Error("--json: cannot write " + path);
  out << doc.dump(2) << "\n";
}

}  // namespace shardtrain_bench::sharding
