#include "shardtrain/parallel/make_strategy.h"

#include "shardtrain/comm/communicator.h"
#include "shardtrain/core/check.h"

namespace shardtrain {
namespace {

double bucket_mb(const ParallelConfig& parallel) {
  // reduce_bucket_size counts fp32 gradient elements.
  return parallel.zero.reduce_bucket_size > 0 ? parallel.zero.reduce_bucket_size * 4.0 / (1024 * 1024)
                                              : parallel.bucket_cap_mb;
}

}  // namespace

namespace {

at::ScalarType dtype_of(DtypeSetting choice, at::ScalarType automatic) {
  switch (choice) {
    case DtypeSetting::kAuto: return automatic;
    case DtypeSetting::kFp32: return at::kFloat;
    case DtypeSetting::kBf16: return at::kBFloat16;
    case DtypeSetting::kFp16: return at::kHalf;
  }
  return automatic;
}

}  // namespace

MixedPrecision mixed_precision_for(Precision mixed_precision, const ParallelConfig& parallel) {
  const at::ScalarType base = mixed_precision == Precision::kBf16   ? at::kBFloat16
                              : mixed_precision == Precision::kFp16 ? at::kHalf
                                                                    : at::kFloat;
  MixedPrecision p;
  p.param_dtype = p.reduce_dtype = base;
  if (parallel.strategy == StrategyKind::kFsdp) {
    p.param_dtype = dtype_of(parallel.fsdp.param_dtype, base);
    p.reduce_dtype = dtype_of(parallel.fsdp.reduce_dtype, base);
  }
  return p;
}

std::unique_ptr<Strategy> make_strategy(const ParallelConfig& parallel, const Topology& topology, UnitModel& model,
                                        Communicator& comm, const AdamWOptions& adamw,
                                        const MixedPrecision& precision) {
  ST_ASSERT(comm.size() == topology.world_size, "make_strategy: the communicator does not span the topology");
  const bool offload = parallel.offload_optimizer == OffloadDevice::kCpu;
  switch (topology.kind) {
    case StrategyKind::kDdp: {
      if (offload && parallel.strategy == StrategyKind::kFsdp)
        throw Error("parallel.offload_optimizer = \"cpu\" with parallel.strategy = \"fsdp\" and "
                    "parallel.fsdp.sharding_strategy = \"NO_SHARD\": NO_SHARD shards nothing (it is ddp), so there is "
                    "no optimizer shard to offload; use sharding_strategy FULL_SHARD or SHARD_GRAD_OP, or "
                    "offload_optimizer = \"none\"");
      if (offload)
        throw Error("parallel.offload_optimizer = \"cpu\" needs a sharded strategy (zero1, zero2, zero3, fsdp, "
                    "hybrid); ddp keeps the optimizer with the replicated model");
      DdpOptions options;
      options.bucket_cap_mb = bucket_mb(parallel);
      options.precision = precision;
      return std::make_unique<DataParallel>(model, comm, adamw, options);
    }
    case StrategyKind::kZero1: {
      ZeroOptions options;
      options.bucket_cap_mb = bucket_mb(parallel);
      options.allgather_bucket_size = parallel.zero.allgather_bucket_size;
      options.offload_optimizer = offload;
      options.precision = precision;
      return std::make_unique<ZeroStrategy>(model, comm, adamw, options);
    }
    case StrategyKind::kZero2:
    case StrategyKind::kZero3:
    case StrategyKind::kHybrid: {
      ShardOptions options = shard_options_for(parallel, topology);
      options.precision = precision;
      return std::make_unique<ShardedStrategy>(model, comm, adamw, options);
    }
    case StrategyKind::kFsdp: break;  // resolved into one of the above by Topology
  }
  ST_ASSERT(false, "make_strategy: unresolved strategy");
  return nullptr;
}

std::unique_ptr<Strategy> make_strategy(const ParallelConfig& parallel, UnitModel& model, Communicator& comm,
                                        const AdamWOptions& adamw) {
  const Topology topology = Topology::assume(comm.rank(), comm.size(), comm.size(), parallel);
  return make_strategy(parallel, topology, model, comm, adamw);
}

}  // namespace shardtrain
