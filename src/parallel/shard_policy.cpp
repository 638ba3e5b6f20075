#include "shardtrain/parallel/shard_policy.h"

#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain {

ShardOptions shard_options_for(const ParallelConfig& parallel, const Topology& topology) {
  const StrategyKind kind = topology.kind;
  ShardOptions options;
  options.stage = kind == StrategyKind::kZero2 ? 2 : 3;
  options.offload_optimizer = parallel.offload_optimizer == OffloadDevice::kCpu;
  options.overlap_comm = topology.fsdp || parallel.zero.overlap_comm;
  // DeepSpeed reduces on every micro-step; FSDP (and its HYBRID_SHARD) accumulates under no_sync.
  options.reduce_every_micro_step = !topology.fsdp && kind != StrategyKind::kHybrid;
  if (kind == StrategyKind::kHybrid) options.ranks_per_node = topology.shard_group_size;
  if (topology.fsdp) {
    // FSDP prefetches exactly one unit ahead.
    const BackwardPrefetch backward = parallel.fsdp.backward_prefetch;
    options.backward_prefetch_elements = backward == BackwardPrefetch::kNoPrefetch ? 0 : 1;
    options.backward_prefetch_post = backward == BackwardPrefetch::kBackwardPost;
    options.forward_prefetch_elements = parallel.fsdp.forward_prefetch ? 1 : 0;
  } else {
    options.forward_prefetch_elements = parallel.zero.stage3_prefetch_bucket_size;
    options.backward_prefetch_elements = parallel.zero.stage3_prefetch_bucket_size;
    options.persistence_threshold = parallel.zero.stage3_param_persistence_threshold;
    options.reduce_bucket_elements = parallel.zero.reduce_bucket_size;
  }
  return options;
}

std::vector<std::string> strategy_notes(const ParallelConfig& parallel, const Topology& topology) {
  const StrategyKind kind = topology.kind;
  const bool fsdp = topology.fsdp;
  const bool sharded = kind == StrategyKind::kZero2 || kind == StrategyKind::kZero3 || kind == StrategyKind::kHybrid;
  std::vector<std::string> notes;
  if (sharded) {
    const ShardOptions o = shard_options_for(parallel, topology);
    notes.push_back(str_format(
        "%s: units = embeddings, each encoder layer, head; stage %d; %s; reduce-scatter per unit%s; %s",
        enum_name(kind), o.stage,
        o.reduce_every_micro_step ? "gradients reduced on every micro-step (DeepSpeed)"
                                  : "accumulation micro-steps keep full gradients (FSDP no_sync)",
        o.reduce_bucket_elements > 0
            ? str_format(" in buckets of >= %lld elements", static_cast<long long>(o.reduce_bucket_elements)).c_str()
            : "",
        o.overlap_comm ? "collectives overlap compute" : "every collective waited for at once (overlap_comm off)"));
    if (kind == StrategyKind::kHybrid && !topology.hybrid())
      notes.push_back("hybrid: all ranks are on one node (parallel.ranks_per_node), so this is full sharding (zero3)");
    if (kind == StrategyKind::kZero2 && parallel.zero.allgather_bucket_size > 0)
      notes.push_back("parallel.zero.allgather_bucket_size bounds zero1's post-step all-gather; zero2 gathers unit "
                      "by unit straight into the parameters, with no staging buffer to bound");
  }
  if (!parallel.zero.contiguous_gradients)
    notes.push_back("parallel.zero.contiguous_gradients = false: gradients always live in contiguous flat buffers "
                    "here, there is no copy to turn off");
  if (parallel.zero.round_robin_gradients)
    notes.push_back("parallel.zero.round_robin_gradients: DeepSpeed balances gradient copies to the CPU optimizer "
                    "across ranks; here each rank copies exactly its own shard, so there is nothing to balance");
  if (fsdp)
    notes.push_back("parallel.fsdp.state_dict_type / offload_to_cpu / rank0_only: every rank writes its own slices of "
                    "one checkpoint file of full-shape tensors (a full state dict on disk, readable at any rank "
                    "count), so no rank ever gathers the full state dict; `shardtrain export` streams it tensor by "
                    "tensor");
  if (parallel.zero.gather_16bit_weights_on_model_save && !fsdp)
    notes.push_back("parallel.zero.gather_16bit_weights_on_model_save: checkpoints always hold the full fp32 model; "
                    "`shardtrain export --dtype float16|bfloat16` writes the 16-bit weights, streaming");
  return notes;
}

}  // namespace shardtrain
