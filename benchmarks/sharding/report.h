// bench_sharding's output (benchmarks/README.md, "bench_sharding"), written by
// rank 0: a preamble on stdout (model, ranks, bytes per parameter), a line per
// strategy as it finishes, then the tables: memory and bytes sent against the
// ZeRO formulas (PASS / FAIL per memory row within kMemoryTolerance, ok / DIFF
// per communication row), each strategy's formulas, the per-step timings and
// collective counts, a WARNING where stats().bytes_sent is not what the logged
// collectives sent, and the memory verdict; with --json the same rows as JSON.
#pragma once
#include <string>
#include <vector>

#include "sharding/run_strategy.h"

namespace shardtrain {
struct EncoderConfig;
}

namespace shardtrain_bench::sharding {

void print_preamble(const Options& options, const shardtrain::EncoderConfig& config, int ranks);
// `reference`: the strategy whose warm-up `row` was checked against (null: the first).
void print_strategy_done(const Row& row, const Row* reference);
void print_results(const std::vector<Row>& rows, int ranks, bool all_memory_pass);
// Throws shardtrain::Error when `path` cannot be written.
void write_json(const std::string& path, const std::vector<Row>& rows, const Options& options,
                const shardtrain::EncoderConfig& config, int ranks, bool all_memory_pass);

}  // namespace shardtrain_bench::sharding
