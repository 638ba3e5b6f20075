// bench_sharding: what the ZeRO paper says one rank holds and sends, from the
// model's parameter counts and the rank counts only (never from a strategy).
//
// Legend: Psi parameters of the model (counted from the model's tensors), N
// ranks, G ranks of a shard group (N; hybrid: --ranks-per-node, default N/2),
// M = N / G replicas (hybrid "nodes").
//
// Memory (bytes one rank holds between steps). In fp32 the ZeRO paper's
// mixed-precision baseline 2 + 2 + K = 16 bytes/param (fp16 params, fp16
// grads, K = 12 for the fp32 master, momentum, variance) becomes
// 4 + 4 + 8 = 16 bytes/param: fp32 params, fp32 grads, AdamW exp_avg +
// exp_avg_sq, and no master copy (the parameters are fp32 already). The
// formulas, per rank (fp32):
//   ddp              baseline        16 Psi
//   zero1            P_os            4 Psi + 4 Psi + 8 Psi / N
//   zero2            P_os+g          4 Psi + (4 + 8) Psi / N
//   zero3, fsdp      P_os+g+p        16 Psi / N  (+ 4 Psi_pers)
//   hybrid           P_os+g+p over G 16 Psi / G  (+ 4 Psi_pers)
// Psi_pers: the parameters below stage3_param_persistence_threshold elements
// (zero3, hybrid; fsdp has none), which every rank keeps whole.
//
// Communication (bytes one rank sends per step, ring accounting): the
// paper's elements per step x 4 bytes (x 2 under mixed precision):
//   ddp, zero1, zero2  2 Psi (N-1)/N   (all-reduce = reduce-scatter + all-gather)
//   zero3, fsdp        3 Psi (N-1)/N   (forward gather, backward gather, reduce-scatter)
//   hybrid             3 Psi (G-1)/G + 2 (Psi/G) (M-1)/M  (in-node zero3 + all-reduce of the shard across nodes)
// Our zero1 reduce-scatters the gradient buckets and all-gathers the
// parameters after the step (parallel/zero1.h), 2 Psi like DeepSpeed's
// stage 1. zero3 sends a little less than 3 Psi: the head unit stays gathered
// from its forward to its backward, and the persistent parameters are
// gathered once.
#pragma once
#include <cstdint>
#include <string>

namespace shardtrain {
class TaskModel;
}

namespace shardtrain_bench::sharding {

struct ModelCounts {
  int64_t psi = 0;              // parameters
  int64_t psi_persistent = 0;   // parameters of tensors below the persistence threshold
  int64_t largest_unit = 0;     // parameters of the largest forward unit (embeddings, a layer, the head)
};

// Counted from the model's tensors.
ModelCounts count_model(const shardtrain::TaskModel& model, int64_t persistence_threshold);

struct Formula {
  std::string memory_name, comm_name;
  double memory_bytes = 0;      // per rank
  double persistent_bytes = 0;  // of memory_bytes: replicated persistent parameters
  double comm_bytes = 0;        // per rank per step (elements x 4)
};

// The formulas above for `strategy` (a --strategies name) on `n` ranks in
// shard groups of `group`; `mixed`: 16-bit parameters and gradients, K = 12
// with the fp32 master. Throws shardtrain::Error for a strategy without one.
Formula zero_formula(const std::string& strategy, const ModelCounts& counts, int n, int group, bool mixed);

}  // namespace shardtrain_bench::sharding
