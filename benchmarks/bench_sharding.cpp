// Memory and communication of every parallel strategy against the ZeRO
// paper's formulas (issue #6, "Proof"): for each strategy in --strategies,
// build BERT (bert-base-cased's shape by default) and the strategy with
// make_strategy() on MPI_COMM_WORLD, run --warmup untimed and --steps timed
// optimizer steps in the Trainer's sequence
//   zero_grad, prepare_backward(true), forward + loss, loss.backward(),
//   finish_backward(), step(lr, max_grad_norm = 1)
// (gradient accumulation 1: zero2 / zero3 reduce-scatter on every micro-step,
// DeepSpeed's way, so with accumulation their traffic would scale with the
// micro-steps), then compare what each rank counts with what the formulas say.
// A memory row passes within 5% of its formula; any row outside fails the
// benchmark (exit code 1) after every row is printed. Communication rows read
// "ok" within 5%, otherwise "DIFF" (they do not change the exit code).
//
// The parts, in benchmarks/sharding/:
//   zero_formulas.h           what the ZeRO paper says a rank holds and sends
//   run_strategy.h            one strategy's run: the check before timing, the
//                             timed steps, the measured memory and bytes sent
//   recording_communicator.h  the Communicator that logs and times every
//                             collective of the strategy
//   hidden_communication.h    exposed, peer-wait and hidden communication time
//                             from that log, and its replay
//   report.h                  the tables and the JSON (benchmarks/README.md)
//
//   mpirun -np N bench_sharding [--strategies ddp,zero1,zero2,zero3,fsdp,hybrid]
//       [--model bert-base|quickstart|PATH/config.json] [--batch-size 2] [--seq-len 64]
//       [--warmup 1] [--steps 2] [--ranks-per-node 0 (= N/2)] [--seed 42] [--json FILE]
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "sharding/report.h"
#include "sharding/run_strategy.h"
#include "shardtrain/comm/world.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/run_config.h"
#include "shardtrain/data/collator.h"
#include "shardtrain/model/task_model.h"

namespace bench_sharding {  // every benchmark's code lives in its own namespace: they compile together (benchmarks/CMakeLists.txt)

using namespace shardtrain;
using namespace shardtrain_bench::sharding;

namespace {

EncoderConfig resolve_model(const std::string& model) {
  EncoderConfig c = model == "bert-base"    ? bert_base_cased_config()
                 : model == "quickstart" ? EncoderConfig::from_file(std::string(SHARDTRAIN_SOURCE_DIR) +
                                                                 "/configs/models/bert_tiny.json")
                                         : EncoderConfig::from_file(model);
  c.hidden_dropout_prob = 0.0;
  c.attention_probs_dropout_prob = 0.0;
  c.classifier_dropout = -1.0;
  c.validate(model);
  return c;
}

std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> items;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) items.push_back(item);
  return items;
}

int run(World& world, int argc, char** argv) {
  CLI::App app{"Per-rank memory and bytes sent of every parallel strategy against the ZeRO paper's formulas"};
  Options options;
  std::string strategies_list = "ddp,zero1,zero2,zero3,fsdp,hybrid", json_path;
  app.add_option("--strategies", strategies_list, "comma-separated strategies (hybrid is skipped on one rank)");
  app.add_option("--model", options.model_name, "bert-base, quickstart (configs/models/bert_tiny.json), or a HF config.json");
  app.add_option("--batch-size", options.batch_size, "samples per rank per step")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--seq-len", options.seq_len, "tokens per sample")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--warmup", options.warmup, "untimed (checked) steps per strategy")->check(CLI::Range(1, 1000000));
  app.add_option("--steps", options.steps, "timed steps per strategy")->check(CLI::Range(1, 1000000));
  app.add_option("--ranks-per-node", options.ranks_per_node, "hybrid: ranks per emulated node; 0 = N/2")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--seed", options.seed, "seed of the weights and the synthetic batches");
  std::string mixed_precision = "no";
  app.add_option("--mixed-precision", mixed_precision, "no (fp32) or bf16: 16-bit parameters, gradients and "
                                                       "communication, fp32 master and AdamW")
      ->check(CLI::IsMember({"no", "bf16"}));
  app.add_option("--json", json_path, "write the results here (rank 0)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (world.rank() == 0) return app.exit(e);
    return e.get_exit_code();
  }
  options.mixed_precision = parse_enum<Precision>(mixed_precision, "--mixed-precision");

  const int rank = world.rank(), ranks = world.size();
  std::vector<std::string> names;
  for (const std::string& name : split_list(strategies_list)) {
    const auto known = enum_names<StrategyKind>();
    if (std::find(known.begin(), known.end(), name) == known.end())
      throw Error("--strategies: \"" + name + "\" is not one of ddp, zero1, zero2, zero3, fsdp, hybrid");
    if (name == "hybrid" && ranks < 2) {
      if (rank == 0) std::printf("# hybrid skipped: it needs at least 2 ranks (one shard group per emulated node)\n");
      continue;
    }
    names.push_back(name);
  }
  if (names.empty()) throw Error("--strategies: nothing to run");

  const EncoderConfig config = resolve_model(options.model_name);
  if (options.seq_len > config.max_position_embeddings)
    throw Error(str_format("--seq-len %lld exceeds the model's max_position_embeddings (%lld)",
                           static_cast<long long>(options.seq_len),
                           static_cast<long long>(config.max_position_embeddings)));
  if (config.num_labels < 2 || config.problem_type == "regression" || config.problem_type == "multi_label_classification")
    throw Error("--model: the benchmark uses labels 0/1 and needs a single-label classifier with num_labels >= 2");
  at::set_num_threads(world.num_threads());

  // The same few batches for every strategy (different per rank).
  std::vector<Batch> batches;
  {
    auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(options.seed) * 1000003u + static_cast<uint64_t>(rank));
    const auto long_options = at::TensorOptions().dtype(at::kLong);
    for (int i = 0; i < std::min(options.warmup + options.steps, 4); ++i) {
      Batch b;
      b.input_ids = at::randint(1, config.vocab_size, {options.batch_size, options.seq_len}, gen, long_options);
      b.token_type_ids = at::zeros({options.batch_size, options.seq_len}, long_options);
      b.attention_mask = at::ones({options.batch_size, options.seq_len}, long_options);
      b.labels = at::randint(0, 2, {options.batch_size}, gen, long_options);
      batches.push_back(b);
    }
  }

  if (rank == 0) print_preamble(options, config, ranks);

  std::vector<Row> rows;
  rows.reserve(names.size());  // `reference` points into it
  for (const std::string& name : names) {
    const Row* reference = rows.empty() ? nullptr : &rows.front();
    rows.push_back(run_strategy(world, name, config, batches, options, reference));
    if (rank == 0) print_strategy_done(rows.back(), reference);
  }

  bool all_memory_pass = true;
  for (const Row& r : rows) all_memory_pass = all_memory_pass && r.memory_pass;

  if (rank == 0) print_results(rows, ranks, all_memory_pass);
  if (rank == 0 && !json_path.empty()) write_json(json_path, rows, options, config, ranks, all_memory_pass);
  return all_memory_pass ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return shardtrain_bench::bench_main("bench_sharding", argc, argv, run); }

}  // namespace bench_sharding

SHARDTRAIN_BENCH_REGISTER(bench_sharding)
