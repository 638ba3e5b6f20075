// ShardedStrategy: ZeRO stage 2 and 3 / FSDP SHARD_GRAD_OP, FULL_SHARD and
// HYBRID_SHARD, unit by unit.
//
// Units are the model's forward units (model/unit_model.h: for BERT the
// embeddings, each encoder layer, the head) — FSDP's wrapping units. Each unit u has its own
// flat buffers, padded to a multiple of the shard group size G, and rank g of
// the group owns chunk g of every unit (FSDP's FlatParameter sharding):
//
//   full params u  [padded_u]  the module's parameters are views into it.
//                              stage 3: its storage exists only while the unit
//                              is gathered (just before its forward, freed
//                              after; again for its backward, freed after).
//                              stage 2: always there (gathered after each step).
//   full grads u   [padded_u]  allocated when the unit's backward starts, .grad
//                              are views; reduce-scattered (average) as soon as
//                              the unit's backward is done, then freed
//   shard          [S = sum_u padded_u / G]  this rank's chunks of every unit:
//                              fp32 parameters, their reduced gradients and the
//                              AdamW state — all the state a rank keeps
//
// Parameters with fewer than persistence_threshold elements (stage 3;
// DeepSpeed's stage3_param_persistence_threshold) form one extra unit that is
// never freed: gathered after each step like stage 2's, reduce-scattered at the
// end of backward.
//
// Prefetch: when a unit is about to run, the all-gathers of the next units in
// execution order (forward: u+1, ...; backward: u-1, ...) are launched while it
// computes, until their elements exceed the prefetch budget (any budget > 0
// prefetches at least one unit; FSDP's forward_prefetch / BACKWARD_PRE are a
// budget of one unit). backward_prefetch_post launches the backward prefetch
// after the unit's backward instead of before it (FSDP BACKWARD_POST).
//
// Gradients: a unit's reduce-scatter is launched from the autograd hooks the
// moment its last gradient is accumulated, in a fixed unit order on every
// rank, and completes while earlier units compute their backward.
// Accumulation micro-steps (prepare_backward(false)): with
// reduce_every_micro_step (DeepSpeed) they reduce-scatter too and the shard
// accumulates (one collective per micro-step, no full gradients kept);
// without it (FSDP no_sync) the units' full gradients are kept and accumulate
// until the micro-step with sync (no collective, full gradient memory).
//
// Hybrid (ranks_per_node = n, 0 < n < world): shard groups are blocks of n
// consecutive ranks (one node); parameters are gathered and gradients
// reduce-scattered inside the node; each unit's reduced chunk is then
// averaged across the nodes (all-reduce between the ranks holding the same
// shard) during the step's last backward, from the next unit's post-backward
// hook (its reduce-scatter has had that unit's backward to complete), in
// unit order, while earlier units still compute. Collectives are launched
// at program points only, never because a test() succeeded, so every rank
// issues them on all communicators in the same order (NCCL needs that).
// Optimizer state: 1/n per rank.
//
// step(): clip by the global norm over the shards, AdamW on the shard, then
// gather the resident units (stage 2 all; stage 3 the persistent one).
//
// offload_optimizer (parallel/offload.h): the AdamW state, an fp32 master
// copy of the shard and a copy of its gradients live in pinned host memory
// and the step runs on the CPU. Each unit's gradient chunk is copied to the
// host on a side stream as soon as its reduce-scatter of the step's last
// micro-step completes (hybrid: after the cross-node average), so the copies
// overlap the backward of the remaining units; step() then runs AdamW unit
// chunk by unit chunk and copies each updated chunk back while the CPU works
// on the next. On a CPU run the shard is in host memory already and nothing
// is copied.
//
// Bytes on the wire per step (Psi elements, G ranks, ring accounting): stage 2
// reduce-scatter + all-gather 2 Psi (G-1)/G; stage 3 forward gather + backward
// gather + reduce-scatter 3 Psi (G-1)/G (the head, gathered last in forward,
// stays for its backward). Memory held between steps: stage 2 4 Psi + 12 Psi/G
// bytes, stage 3 16 Psi/G (plus persistent parameters), plus the transient
// gathered units (memory().peak_transient_bytes).
//
// Checkpoints: the same HDF5 layout as every strategy (checkpoint_parts()
// maps each owned chunk back to the named tensors); hybrid replicas split
// their shard so each element is written once, and finish_load() gathers it
// back across the nodes.
//
// The step's phases and each unit's states are explicit (src/parallel/
// shard_units.h draws them; docs/DESIGN.md, "Sharded units"):
//   kUnsettled  built: every unit holds this rank's own full initial values
//   kIdle       between steps: the shard holds the state, stage-3 units freed
//   kBackward   a backward round is open (prepare_backward() to the next one
//               or to finish_backward())
//   kReduced    finish_backward() done: the shard's gradients are the average
// How DeepSpeed's and FSDP's knobs become ShardOptions is
// parallel/shard_policy.h.
//
//   ShardOptions options;  // stage 3, no prefetch
//   options.forward_prefetch_elements = options.backward_prefetch_elements = 1;  // FSDP: one unit ahead
//   ShardedStrategy fsdp(*model, comm, adamw_options, options);
//   fsdp.broadcast_parameters(0);
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "shardtrain/parallel/strategy.h"

namespace shardtrain {

struct ShardOptions {
  int stage = 3;                           // 2 (SHARD_GRAD_OP) or 3 (FULL_SHARD)
  int ranks_per_node = 0;                  // hybrid when 0 < n < world size (n must divide it)
  bool overlap_comm = true;                // false: each collective is waited for when launched
  int64_t forward_prefetch_elements = 0;   // stage 3; 0 = no prefetch
  int64_t backward_prefetch_elements = 0;  // stage 3; 0 = no prefetch
  bool backward_prefetch_post = false;     // FSDP BACKWARD_POST instead of BACKWARD_PRE
  int64_t persistence_threshold = 0;       // stage 3: smaller parameters are never freed
  bool offload_optimizer = false;          // AdamW state and master shard in host memory
  // Tests: with offload_optimizer, keep the host copies and run the offload
  // pipeline even when the shard is in host memory already (a CPU run).
  bool force_offload_copies = false;
  // true (DeepSpeed): gradients are reduce-scattered on every micro-step and
  // accumulate in the shard; false (FSDP no_sync): micro-steps without sync
  // keep the full gradients and reduce once.
  bool reduce_every_micro_step = true;
  // Units whose backward is done wait until together they hold this many
  // gradient elements, then their reduce-scatters are launched together
  // (DeepSpeed reduce_bucket_size); 0 = each unit as soon as it is done.
  int64_t reduce_bucket_elements = 0;
  // 16-bit units (gathers and gradients in param_dtype) and reductions in
  // reduce_dtype (FSDP's param_dtype / reduce_dtype; DeepSpeed reduces in the
  // 16-bit dtype). The shard's gradients are kept in reduce_dtype, its
  // parameters in param_dtype (what the gathers read), and an fp32 master copy
  // beside AdamW's state: stage 3 16 Psi / G bytes, stage 2 2 Psi + 14 Psi / G.
  MixedPrecision precision;
};

class ShardedStrategy : public Strategy {
 public:
  // The model's parameters move into the unit buffers (values kept) and the
  // strategy installs itself as the model's UnitHooks; `model` and `comm`
  // must outlive this object. Throws Error for a stage other than 2 or 3 and
  // for a ranks_per_node that does not divide the world size.
  ShardedStrategy(UnitModel& model, Communicator& comm, const AdamWOptions& adamw,
                  const ShardOptions& options = {});
  // Removes the hooks. Units that are gathered stay usable in the model; freed
  // (stage 3) units stay without memory: read the parameters through
  // flat_params() first if they are needed afterwards.
  ~ShardedStrategy() override;

  std::string name() const override;  // "zero2", "zero3" or "hybrid"
  void broadcast_parameters(int root) override;
  void zero_grad() override;
  void prepare_backward(bool sync) override;
  void finish_backward() override;
  StepOutcome step(const StepRequest& request) override;
  const ParamLayout& layout() const override;
  // Gathers every unit into one full buffer (a collective: every rank calls
  // it); for results and tests, not for the training loop.
  at::Tensor flat_params() const override;
  std::vector<FlatPart> checkpoint_parts() override;
  int64_t optimizer_step() const override;
  void finish_load(int64_t optimizer_step) override;
  StrategyMemory memory() const override;

  // Units after the persistent parameters were taken out: the forward units
  // that still have parameters, then the persistent unit (if any).
  int64_t num_units() const;
  int64_t shard_numel() const;  // S
  // The rank-averaged gradient of this rank's shard after finish_backward(),
  // and the AdamW state; for tests.
  at::Tensor shard_grads() const;
  const AdamW& optimizer() const;
  // The full (layout-order) gradient average, gathered from the shards; a
  // collective, for tests.
  at::Tensor gather_grads() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardtrain
