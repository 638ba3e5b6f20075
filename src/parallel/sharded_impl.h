// Private to src/parallel: the state of one ShardedStrategy (parallel/
// sharded.h), which the files that implement it share (docs/DESIGN.md,
// "Sharded units"). Each concept is in one file:
//
//   sharded.cpp             the step: its phases and their checks, settling the
//                           initial shard, staging the shard buffer, the
//                           Strategy calls that move from phase to phase
//   sharded_build.cpp       the strategy built from the model: communicators,
//                           units (forward units, the persistent unit, chunks,
//                           segments), optimizer, hooks; and taken down
//   sharded_hooks.cpp       what runs inside forward and backward: gather before
//                           a unit's forward, free after, pre-backward gather,
//                           post-backward reduction, MPI progress
//   sharded_gather.cpp      a unit's parameters: all-gather, free, prefetch
//   sharded_reduce.cpp      a unit's gradients: attach, reduce-scatter in a fixed
//                           order (bucketed), hybrid's cross-node average, host
//                           copies for offload, closing a round
//   sharded_checkpoint.cpp  the shard in and out: checkpoint parts, finish_load
//                           (hybrid windows), the full parameters and gradients
//
// The units' own states are shard_units.h; which layout elements the shard
// holds, shard_map.h; the optimizer over the shard, shard_optimizer.h.
//
// Shapes: S shard elements (sum over units of chunk), G ranks in a shard
// group; a unit's buffers are [padded], its chunk [chunk] = [padded / G].
#pragma once
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "parallel/flat_model.h"
#include "parallel/shard_map.h"
#include "parallel/shard_optimizer.h"
#include "parallel/shard_units.h"
#include "shardtrain/comm/communicator.h"
#include "shardtrain/model/unit_model.h"
#include "shardtrain/parallel/sharded.h"

namespace shardtrain {

// The step's phases (sharded.h says what each means; sharded.cpp checks
// every change).
enum class ShardedPhase { kUnsettled, kIdle, kBackward, kReduced };

struct ShardedStrategy::Impl : public UnitHooks {
  Communicator& comm;
  UnitModel& model;
  ShardOptions options;
  // First, so they are destroyed last: NCCL records its streams on the buffers
  // it reads and writes, and a buffer freed after its stream is gone fails.
  std::unique_ptr<Communicator> gather_comm;  // the shard group (all-gathers)
  std::unique_ptr<Communicator> reduce_comm;  // the shard group again (reduce-scatters, norms)
  std::unique_ptr<Communicator> inter;        // hybrid: ranks holding the same shard
  std::unique_ptr<ParamLayout> layout;
  std::vector<at::Tensor> parameters;  // the module's parameters, layout order
  std::vector<ShardUnit> units;
  std::vector<int> unit_of_slot;
  std::vector<int> unit_of_forward;  // model unit -> units index, -1 when it has no parameters left
  std::vector<int> forward_order;    // units in forward order (the persistent unit is not in it)
  std::vector<int> reduce_order;     // backward order, the persistent unit last

  ShardedPhase phase = ShardedPhase::kUnsettled;
  // The open backward round (phase kBackward).
  struct Round {
    bool reduces = true;     // units reduce-scatter in this round (sync, or DeepSpeed's every micro-step)
    bool last = true;        // this round's reductions complete the step's gradients
    size_t next_reduce = 0;  // reduce_order position of the next reduce-scatter to launch
    size_t next_inter = 0;   // hybrid: reduce_order position of the next cross-node average
  } round;

  int group_rank = 0, group_size = 1;
  int64_t shard_numel = 0;
  at::Tensor shard_params;  // [S] param_dtype, on the model's device: gathers read it
  at::Tensor shard_grads;   // [S] reduce_dtype
  std::unique_ptr<ShardOptimizer> optimizer;
  std::vector<ShardSegment> segments;  // the layout elements of the shard
  std::vector<ElementRange> shard_decay;

  StrategyStats& stats;
  int64_t transient_bytes = 0, peak_transient_bytes = 0;
  std::unique_ptr<GradientReadyHooks> hooks;

  Impl(Communicator& c, UnitModel& m, const ShardOptions& o, StrategyStats& counters)
      : comm(c), model(m), options(o), stats(counters) {}

  bool frees(const ShardUnit& u) const { return !u.resident; }
  HostOptimizer* host() const { return optimizer->host(); }
  // The shard's fp32 values live outside shard_params (mixed precision's master copy).
  bool has_master() const { return optimizer->master().defined(); }
  int64_t param_bytes(int64_t elements) const { return elements * shard_params.element_size(); }

  // Stage 2 keeps every unit gathered, so this rank's chunk of each is already
  // in the unit buffers: the shard buffer exists only during step() and
  // finish_load() (4 Psi + 12 Psi/N bytes held, as ZeRO counts stage 2).
  bool transient_shard() const { return options.stage == 2; }

  at::Tensor shard_of(const ShardUnit& u, const at::Tensor& shard) const {
    return shard.narrow(0, u.shard_offset, u.chunk);
  }
  at::Tensor own_chunk(const ShardUnit& u) const { return u.params.narrow(0, group_rank * u.chunk, u.chunk); }

  void add_transient(int64_t bytes_added) {
    transient_bytes += bytes_added;
    peak_transient_bytes = std::max(peak_transient_bytes, transient_bytes);
  }

  // ---- the step (sharded.cpp) ----
  void advance(ShardedPhase to);
  // Waits for a collective, counting the time in stats.seconds_waiting; returns it.
  double wait(Work& work);
  void stage_shard(bool copy);
  void release_shard();
  void settle();

  // ---- construction (sharded_build.cpp) ----
  void build_units(const std::vector<std::pair<std::string, at::Tensor>>& named);

  // ---- parameters (sharded_gather.cpp) ----
  void launch_gather(ShardUnit& u, bool prefetched);
  void complete_gather(ShardUnit& u);
  void ensure_gathered(ShardUnit& u);
  void gather_resident();
  void free_unit(ShardUnit& u);
  void prefetch(const ShardUnit& u, int64_t budget, bool backward);

  // ---- gradients (sharded_reduce.cpp) ----
  void attach_grads(ShardUnit& u);
  void drop_grads(ShardUnit& u);
  void launch_reduce(ShardUnit& u, bool from_hook);
  void complete_reduce(ShardUnit& u);
  void launch_inters_before(size_t end);
  void complete_inter(ShardUnit& u);
  void offload_rest();
  void launch_ready_reduces(bool from_hook, bool flush = false);
  void finish_reducing_round();

  // ---- hooks (sharded_hooks.cpp) ----
  void before_forward(int64_t forward_unit) override;
  at::Tensor after_forward(int64_t forward_unit, at::Tensor output) override;
  void pre_backward(ShardUnit& u);
  void on_gradient(size_t slot);
  void post_backward(ShardUnit& u);
  void poll();

  // ---- checkpoints (sharded_checkpoint.cpp) ----
  void gather_windows(at::Tensor& full);
};

}  // namespace shardtrain
