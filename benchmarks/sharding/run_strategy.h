// bench_sharding: one strategy's run, and what it measured (a Row).
//
// run_strategy() builds BERT from `config` (seeded weights, dropout off) and
// the strategy with make_strategy() on a RecordingCommunicator over
// MPI_COMM_WORLD (recording_communicator.h), runs options.warmup checked and
// options.steps timed optimizer steps in the Trainer's sequence (train_step,
// gradient accumulation 1), then measures:
//
//   memory         Strategy::memory() after the timed steps (what a rank holds
//                  between steps), each field the max over ranks; the row
//                  passes when memory().total() is within kMemoryTolerance of
//                  its ZeRO formula (zero_formulas.h). The peak gathered buffer
//                  (memory().peak_transient_bytes: gathered parameters +
//                  unsharded gradients alive at once) is kept beside it.
//   communication  the delta of stats().bytes_sent over the timed steps /
//                  steps, max over ranks; the bytes of the logged collectives
//                  beside it; blocked, exposed and peer-wait time, and the
//                  communication time alone from a replay
//                  (hidden_communication.h); the strategy's own
//                  stats().seconds_waiting.
//
// Check before timing: every strategy starts from the same seeded weights and
// sees the same seeded batches, so each warm-up step's loss and gradient norm
// must agree with the first strategy's (`reference`) within 1e-4 relative
// (fp32 reduction order moves them by ~1e-6; a sum instead of an average, a
// lost bucket or a stale shard moves them by > 1e-2), and after the warm-up
// every rank's full parameters (flat_params(), gathered for sharded
// strategies) must be bit-identical to rank 0's. Otherwise the job aborts.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "bench_util.h"
#include "sharding/zero_formulas.h"
#include "shardtrain/comm/world.h"
#include "shardtrain/core/enum_names.h"
#include "shardtrain/data/collator.h"
#include "shardtrain/parallel/strategy.h"

namespace shardtrain {
struct EncoderConfig;
}

namespace shardtrain_bench::sharding {

constexpr double kMemoryTolerance = 0.05;  // the 5%

// The command line's settings (bench_sharding.cpp).
struct Options {
  std::string model_name = "bert-base";
  int64_t batch_size = 2, seq_len = 64, seed = 42;
  int warmup = 1, steps = 2;
  int ranks_per_node = 0;
  shardtrain::Precision mixed_precision = shardtrain::Precision::kNo;  // --mixed-precision
};

struct Row {
  std::string strategy;
  int ranks = 0, group = 0;
  shardtrain::StrategyMemory memory;  // each field the max over ranks
  ModelCounts counts;
  Formula formula;
  double memory_ratio = 0;
  bool memory_pass = false;
  double bytes_sent_per_step = 0;       // stats().bytes_sent delta / steps, max over ranks
  double logged_bytes_per_step = 0;     // the recorded collectives' bytes / steps, max over ranks
  double comm_ratio = 0;                // 0 when the formula is 0 (one rank)
  double seconds_waiting_per_step = 0;  // stats().seconds_waiting delta / steps, max over ranks
  double blocked_per_step = 0;          // time in Work::wait() / steps, max over ranks
  double comm_alone_per_step = 0;       // faster replay / steps, max over ranks
  double comm_exposed_per_step = 0;     // blocked after every rank had launched / steps, max over ranks
  double peer_wait_per_step = 0;        // blocked before the last rank launched / steps, max over ranks
  bool one_node = true;                 // blocked time split by launch times (one clock)
  double hidden_share = -1;             // -1: no communication
  int64_t collectives_per_step = 0;
  double gathers_per_step = 0, prefetched_per_step = 0, reductions_per_step = 0, reductions_in_backward_per_step = 0;
  Summary step_s;
  std::vector<double> warmup_losses, warmup_norms;
};

// Runs strategy `name` (a --strategies name) on `batches` (this rank's; the
// same for every strategy) and measures it; a collective on world.comm().
// `reference`: the first strategy's row, whose warm-up losses and norms this
// one must match (null for the first).
Row run_strategy(shardtrain::World& world, const std::string& name, const shardtrain::EncoderConfig& config,
                 const std::vector<shardtrain::Batch>& batches, const Options& options, const Row* reference);

}  // namespace shardtrain_bench::sharding
