#include "shardtrain/parallel/strategy.h"

#include "shardtrain/comm/communicator.h"

namespace shardtrain {

void Strategy::count_bytes_of(const Communicator& comm) { byte_counters_.emplace_back(&comm, comm.stats().bytes_sent); }

const StrategyStats& Strategy::stats() const {
  stats_.bytes_sent = 0;
  for (const auto& [comm, base] : byte_counters_) stats_.bytes_sent += comm->stats().bytes_sent - base;
  return stats_;
}

}  // namespace shardtrain
