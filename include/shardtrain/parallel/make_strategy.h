// Builds the Strategy named by parallel.strategy.
//
//   "ddp"    DataParallel (parallel/ddp.h)
//   "zero1"  ZeroStrategy stage 1 (parallel/zero.h)
//   "zero2"  ZeroStrategy stage 2
//
// The other names the config accepts (zero3, fsdp, hybrid) are not available
// in this version yet: require_available_strategy() and make_strategy() throw
// shardtrain::Error for them, naming the key and the names that work.
//
//   std::unique_ptr<Strategy> strategy = make_strategy(config.parallel.strategy, *model, comm, adamw, ddp_options);
//   strategy->broadcast_parameters(0);
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "shardtrain/parallel/ddp.h"
#include "shardtrain/parallel/strategy.h"

namespace shardtrain {

// The names make_strategy() builds: {"ddp", "zero1", "zero2"}.
std::vector<std::string> available_strategies();

// Throws shardtrain::Error ("parallel.strategy = \"zero3\" is not available in
// this version yet; use ddp, zero1 or zero2") unless `name` is available.
// Cheap: call it before any expensive setup.
void require_available_strategy(const std::string& name);

// The model's parameters move into the strategy's flat buffers. `comm` must
// outlive the strategy. ddp_options.bucket_cap_mb also sets ZeRO stage 1's
// all-reduce buckets.
std::unique_ptr<Strategy> make_strategy(const std::string& name, BertForSequenceClassification& model,
                                        Communicator& comm, const AdamWOptions& adamw,
                                        const DdpOptions& ddp_options = {});

}  // namespace shardtrain
