#include "shardtrain/parallel/make_strategy.h"

#include <algorithm>

#include "shardtrain/core/check.h"
#include "shardtrain/parallel/zero.h"

namespace shardtrain {

std::vector<std::string> available_strategies() { return {"ddp", "zero1", "zero2"}; }

void require_available_strategy(const std::string& name) {
  const std::vector<std::string> names = available_strategies();
  if (std::find(names.begin(), names.end(), name) != names.end()) return;
  throw Error("parallel.strategy = \"" + name + "\" is not available in this version yet; use ddp, zero1 or zero2");
}

std::unique_ptr<Strategy> make_strategy(const std::string& name, BertForSequenceClassification& model,
                                        Communicator& comm, const AdamWOptions& adamw,
                                        const DdpOptions& ddp_options) {
  require_available_strategy(name);
  if (name == "ddp") return std::make_unique<DataParallel>(model, comm, adamw, ddp_options);
  ZeroOptions zero;
  zero.stage = name == "zero1" ? 1 : 2;
  zero.bucket_cap_mb = ddp_options.bucket_cap_mb;
  return std::make_unique<ZeroStrategy>(model, comm, adamw, zero);
}

}  // namespace shardtrain
