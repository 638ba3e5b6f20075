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
  }
  return options;
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
