#include "sharding/zero_formulas.h"

#include <algorithm>
#include <vector>

#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/model/task_model.h"

using namespace shardtrain;

namespace shardtrain_bench::sharding {

ModelCounts count_model(const TaskModel& model, int64_t persistence_threshold) {
  ModelCounts c;
  std::vector<int64_t> unit_numel(static_cast<size_t>(model.num_units()), 0);
  for (const auto& [name, tensor] : model.state_dict()) {
    c.psi += tensor.numel();
    if (tensor.numel() < persistence_threshold) c.psi_persistent += tensor.numel();
    unit_numel[static_cast<size_t>(model.unit_of(name))] += tensor.numel();
  }
  c.largest_unit = *std::max_element(unit_numel.begin(), unit_numel.end());
  return c;
}

// The ZeRO paper's per-rank bytes (Psi parameters, N ranks, K = 12 bytes of
// optimizer state per parameter), fp32 (parameters and gradients 4 bytes, K =
// 8 for AdamW's moments alone: the parameters are the master) or mixed
// precision (16-bit parameters and gradients, K = 12 with the fp32 master).
Formula zero_formula(const std::string& strategy, const ModelCounts& counts, int n, int group, bool mixed) {
  const double psi = static_cast<double>(counts.psi);
  const double N = n, G = group, M = static_cast<double>(n) / group;
  const double b = mixed ? 2 : 4;  // bytes of a parameter or gradient element
  const double K = mixed ? 12 : 8;
  const double pers = b * static_cast<double>(counts.psi_persistent);
  Formula f;
  auto name = [](double x) { return str_format("%g", x); };
  if (strategy == "ddp") {
    f.memory_name = name(2 * b + K) + " Psi";
    f.memory_bytes = (2 * b + K) * psi;
    f.comm_name = "2 Psi (N-1)/N";
    f.comm_bytes = b * 2 * psi * (N - 1) / N;
  } else if (strategy == "zero1") {
    f.memory_name = "P_os: " + name(2 * b) + " Psi + " + name(K) + " Psi/N";
    f.memory_bytes = 2 * b * psi + K * psi / N;
    f.comm_name = "2 Psi (N-1)/N";
    f.comm_bytes = b * 2 * psi * (N - 1) / N;
  } else if (strategy == "zero2") {
    f.memory_name = "P_os+g: " + name(b) + " Psi + " + name(b + K) + " Psi/N";
    f.memory_bytes = b * psi + (b + K) * psi / N;
    f.comm_name = "2 Psi (N-1)/N";
    f.comm_bytes = b * 2 * psi * (N - 1) / N;
  } else if (strategy == "zero3" || strategy == "fsdp") {
    f.memory_name = "P_os+g+p: 16 Psi/N" + (strategy == "zero3" ? " + " + name(b) + " Psi_pers" : std::string());
    f.persistent_bytes = strategy == "zero3" ? pers : 0.0;
    f.memory_bytes = 16 * psi / N + f.persistent_bytes;
    f.comm_name = "3 Psi (N-1)/N";
    f.comm_bytes = b * 3 * psi * (N - 1) / N;
  } else if (strategy == "hybrid") {
    f.memory_name = "P_os+g+p over G: 16 Psi/G + " + name(b) + " Psi_pers";
    f.persistent_bytes = pers;
    f.memory_bytes = 16 * psi / G + f.persistent_bytes;
    f.comm_name = "3 Psi (G-1)/G + 2 (Psi/G) (M-1)/M";
    f.comm_bytes = b * (3 * psi * (G - 1) / G + 2 * (psi / G) * (M - 1) / M);
  } else {
    throw Error("--strategies: no formula for \"" + strategy + "\"");
  }
  return f;
}

}  // namespace shardtrain_bench::sharding
