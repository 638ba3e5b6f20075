#include "shardtrain/parallel/make_strategy.h"

#include "shardtrain/comm/communicator.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain {

std::vector<std::string> available_strategies() { return {"ddp", "zero1", "zero2", "zero3", "fsdp", "hybrid"}; }

namespace {

// The strategy an fsdp sharding_strategy stands for.
std::string fsdp_equivalent(const FsdpConfig& fsdp) {
  if (fsdp.sharding_strategy == "FULL_SHARD") return "zero3";
  if (fsdp.sharding_strategy == "SHARD_GRAD_OP") return "zero2";
  if (fsdp.sharding_strategy == "NO_SHARD") return "ddp";
  if (fsdp.sharding_strategy == "HYBRID_SHARD") return "hybrid";
  throw Error("parallel.fsdp.sharding_strategy = \"" + fsdp.sharding_strategy +
              "\" is not one of FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD");
}

double bucket_mb(const ParallelConfig& parallel) {
  // reduce_bucket_size counts fp32 gradient elements.
  return parallel.zero.reduce_bucket_size > 0 ? parallel.zero.reduce_bucket_size * 4.0 / (1024 * 1024)
                                              : parallel.bucket_cap_mb;
}

}  // namespace

ShardOptions shard_options_for(const ParallelConfig& parallel, int world_size, int node_size) {
  const bool fsdp = parallel.strategy == "fsdp";
  const std::string kind = fsdp ? fsdp_equivalent(parallel.fsdp) : parallel.strategy;
  ShardOptions options;
  options.stage = kind == "zero2" ? 2 : 3;
  options.offload_optimizer = parallel.offload_optimizer == "cpu";
  options.overlap_comm = fsdp || parallel.zero.overlap_comm;
  // DeepSpeed reduces on every micro-step; FSDP (and its HYBRID_SHARD) accumulates under no_sync.
  options.reduce_every_micro_step = !fsdp && kind != "hybrid";
  if (kind == "hybrid") {
    options.ranks_per_node = parallel.ranks_per_node > 0 ? static_cast<int>(parallel.ranks_per_node)
                                                         : (node_size > 0 ? node_size : world_size);
    if (world_size % options.ranks_per_node != 0)
      throw Error(str_format("parallel.strategy = \"hybrid\": %d ranks per node does not divide the %d ranks; set "
                             "parallel.ranks_per_node to a divisor of the world size",
                             options.ranks_per_node, world_size));
  }
  if (fsdp) {
    // FSDP prefetches exactly one unit ahead.
    const std::string& backward = parallel.fsdp.backward_prefetch;
    if (backward != "BACKWARD_PRE" && backward != "BACKWARD_POST" && backward != "NO_PREFETCH")
      throw Error("parallel.fsdp.backward_prefetch = \"" + backward +
                  "\" is not one of BACKWARD_PRE, BACKWARD_POST, NO_PREFETCH");
    options.backward_prefetch_elements = backward == "NO_PREFETCH" ? 0 : 1;
    options.backward_prefetch_post = backward == "BACKWARD_POST";
    options.forward_prefetch_elements = parallel.fsdp.forward_prefetch ? 1 : 0;
  } else {
    options.forward_prefetch_elements = parallel.zero.stage3_prefetch_bucket_size;
    options.backward_prefetch_elements = parallel.zero.stage3_prefetch_bucket_size;
    options.persistence_threshold = parallel.zero.stage3_param_persistence_threshold;
    options.reduce_bucket_elements = parallel.zero.reduce_bucket_size;
  }
  return options;
}

std::vector<std::string> strategy_notes(const ParallelConfig& parallel, int world_size, int node_size) {
  const bool fsdp = parallel.strategy == "fsdp";
  const std::string kind = fsdp ? fsdp_equivalent(parallel.fsdp) : parallel.strategy;
  const bool sharded = kind == "zero2" || kind == "zero3" || kind == "hybrid";
  std::vector<std::string> notes;
  if (sharded) {
    const ShardOptions o = shard_options_for(parallel, world_size, node_size);
    notes.push_back(str_format(
        "%s: units = embeddings, each encoder layer, head; stage %d; %s; reduce-scatter per unit%s; %s",
        kind.c_str(), o.stage, o.reduce_every_micro_step ? "gradients reduced on every micro-step (DeepSpeed)"
                                                          : "accumulation micro-steps keep full gradients (FSDP no_sync)",
        o.reduce_bucket_elements > 0 ? str_format(" in buckets of >= %lld elements",
                                                  static_cast<long long>(o.reduce_bucket_elements)).c_str()
                                     : "",
        o.overlap_comm ? "collectives overlap compute" : "every collective waited for at once (overlap_comm off)"));
    if (kind == "hybrid" && o.ranks_per_node >= world_size)
      notes.push_back("hybrid: all ranks are on one node (parallel.ranks_per_node), so this is full sharding (zero3)");
    if (kind == "zero2" && parallel.zero.allgather_bucket_size > 0)
      notes.push_back("parallel.zero.allgather_bucket_size bounds zero1's post-step all-gather; " + kind +
                      " gathers unit by unit straight into the parameters, with no staging buffer to bound");
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

std::unique_ptr<Strategy> make_strategy(const ParallelConfig& parallel, BertForSequenceClassification& model,
                                        Communicator& comm, const AdamWOptions& adamw, int node_size) {
  const std::string kind = parallel.strategy == "fsdp" ? fsdp_equivalent(parallel.fsdp) : parallel.strategy;
  const bool offload = parallel.offload_optimizer == "cpu";
  if (parallel.offload_optimizer != "none" && !offload)
    throw Error("parallel.offload_optimizer = \"" + parallel.offload_optimizer + "\" is not one of none, cpu");
  if (kind == "ddp") {
    if (offload)
      throw Error("parallel.offload_optimizer = \"cpu\" needs a sharded strategy (zero1, zero2, zero3, fsdp, hybrid); "
                  "ddp keeps the optimizer with the replicated model");
    DdpOptions options;
    options.bucket_cap_mb = bucket_mb(parallel);
    return std::make_unique<DataParallel>(model, comm, adamw, options);
  }
  if (kind == "zero1") {
    ZeroOptions options;
    options.bucket_cap_mb = bucket_mb(parallel);
    options.allgather_bucket_size = parallel.zero.allgather_bucket_size;
    options.offload_optimizer = offload;
    return std::make_unique<ZeroStrategy>(model, comm, adamw, options);
  }
  if (kind == "zero2" || kind == "zero3" || kind == "hybrid")
    return std::make_unique<ShardedStrategy>(model, comm, adamw, shard_options_for(parallel, comm.size(), node_size));
  throw Error("parallel.strategy = \"" + parallel.strategy +
              "\" is not one of ddp, zero1, zero2, zero3, fsdp, hybrid");
}

std::unique_ptr<Strategy> make_strategy(const std::string& name, BertForSequenceClassification& model,
                                        Communicator& comm, const AdamWOptions& adamw) {
  ParallelConfig parallel;
  parallel.strategy = name;
  return make_strategy(parallel, model, comm, adamw);
}

}  // namespace shardtrain
