// shardtrain's side of benchmarks/side_by_side.sh (that script runs the whole
// comparison; read it first). Three subcommands:
//
//   bench_side_by_side init --model quickstart|bert-base|modernbert-base|CONFIG --seed 42 --out DIR
//       A randomly initialised model (HF _init_weights, model/bert.h) written
//       as a HF folder (config.json + model.safetensors): both sides start
//       from these weights. modernbert-base is configs/models/modernbert_base.json
//       (ModernBERT-base's shape: 22 layers, hidden 768, window 128).
//   bench_side_by_side batches --data TSV --batch-size B --world W --seed 42 --steps N --out FILE
//       The first N global batches DistributedSampler (data/sampler.h) hands
//       out for that seed, batch and world size (epoch 0), and every row's
//       label, as JSON: {"world_size", "batch_size", "batches": [[rows]...],
//       "labels": [...]}. Rank r of W trains on positions r, r+W, ... of each.
//   mpirun -np W bench_side_by_side train --model-dir DIR --data TSV --vocab VOCAB
//       --batch-size B --seed 42 --batches FILE [--layout packed|padded] [--max-length 128]
//       [--first-batch 0] [--warmup 1] [--steps 3] [--dropout P] [--lr 2e-5] [--eval-data TSV]
//       [--eval-batch-size 32] [--profile TRACE.json] [--turnstile DIR]
//       Trains the model of DIR with DDP (parallel/ddp.h, default buckets)
//       through train_step (train/train_step.h, the trainer's step: zero_grad,
//       prepare_backward, forward + loss, backward, finish_backward, clipping
//       at 1 + AdamW with HF's no-decay groups, weight decay 0.01) on the
//       sampler's global batches from --first-batch on, first checking they
//       are the FILE's; tokenizes the
//       TSV as `shardtrain train` does (VOCAB: a vocab.txt, a tokenizer.json or
//       a model folder, as model.vocab; --max-length tokens, pairs truncated
//       longest first). --layout packed is model.unpadded = true (forward_batch packs the
//       collated batch: what `shardtrain train` runs by default), padded is
//       model.unpadded = false (collate + forward). With
//       --eval-data it also times one sharded eval pass (EvalPlan, no grad) in
//       the same layout. Rank 0 prints one JSON object: per-step losses (mean
//       over ranks), per-step seconds (slowest rank), real tokens per global
//       batch, the time from process start to the end of the first step, the
//       eval pass's seconds. --profile writes the last step as a Chrome trace
//       (rank 0; benchmarks/profile_summary.py sums it per op). --turnstile
//       DIR: before each step (and the eval pass) rank r blocks reading the
//       FIFO DIR/go.<r> and after it writes a line to DIR/done.<r>, so that
//       side_by_side.sh can alternate the sides step by step (a blocked
//       read uses no core).
//
// It is `shardtrain train`'s step without the run folder, checkpoints and
// reports, so that the turnstile can time step by step.
#include <torch/csrc/autograd/profiler_legacy.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "shardtrain/comm/mpi_communicator.h"
#include "shardtrain/comm/world.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/data/collator.h"
#include "shardtrain/data/dataset.h"
#include "shardtrain/data/reader.h"
#include "shardtrain/data/sampler.h"
#include "shardtrain/data/tokenizer.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/model/hf_folder.h"
#include "shardtrain/parallel/make_strategy.h"
#include "shardtrain/train/train_step.h"

namespace bench_side_by_side {  // every benchmark's code lives in its own namespace: they compile together (benchmarks/CMakeLists.txt)

using namespace shardtrain;
using shardtrain_bench::Clock;
using shardtrain_bench::seconds_since;

namespace {

const Clock::time_point kProcessStart = Clock::now();

EncoderConfig resolve_model(const std::string& model) {
  if (model == "quickstart") return EncoderConfig::from_file(std::string(SHARDTRAIN_SOURCE_DIR) + "/configs/models/bert_tiny.json");
  if (model == "bert-base") return bert_base_cased_config();
  if (model == "modernbert-base")
    return EncoderConfig::from_file(std::string(SHARDTRAIN_SOURCE_DIR) + "/configs/models/modernbert_base.json");
  return EncoderConfig::from_file(model);
}

RawTable read_mrpc(const std::string& path) {
  ReaderOptions options;
  options.text_a = "#1 String";
  options.text_b = "#2 String";
  options.label = "Quality";
  return read_table(path, options);
}

SamplerOptions sampler_options(int64_t num_examples, int64_t batch_size, int world, int rank, int64_t seed) {
  SamplerOptions o;
  o.num_examples = num_examples;
  o.batch_size = batch_size;
  o.world_size = world;
  o.rank = rank;
  o.seed = static_cast<uint64_t>(seed);
  return o;
}

void write_json(const nlohmann::json& doc, const std::string& path) {
  std::ofstream out(path);
  if (!out) throw Error("cannot write " + path);
  out << doc.dump() << "\n";
}

struct TrainArgs {
  std::string model_dir, data, vocab, batches, layout = "packed", eval_data, profile, turnstile;
  int64_t batch_size = 16, seed = 42, eval_batch_size = 32;
  int max_length = 128;
  int first_batch = 0, warmup = 1, steps = 3;
  double dropout = -1, lr = 2e-5;
};

// The turn protocol of --turnstile (see the top of this file).
void wait_turn(const TrainArgs& a, int rank) {
  if (a.turnstile.empty()) return;
  std::ifstream go(a.turnstile + "/go." + std::to_string(rank));
  std::string line;
  if (!std::getline(go, line)) throw Error("--turnstile: " + a.turnstile + "/go." + std::to_string(rank) + " closed");
}

void end_turn(const TrainArgs& a, int rank) {
  if (a.turnstile.empty()) return;
  std::ofstream done(a.turnstile + "/done." + std::to_string(rank));
  done << "done" << std::endl;
}

int run_train(World& world, const TrainArgs& a) {
  const int rank = world.rank(), W = world.size();
  const bool packed = a.layout == "packed";
  HfLoadOptions load;
  if (a.dropout >= 0) load.hidden_dropout_prob = load.attention_probs_dropout_prob = a.dropout;
  HfModel hf = load_hf_folder(a.model_dir, load);
  TaskModel& model = *hf.model;
  if (!hf.report.message().empty()) throw Error(a.model_dir + ": " + hf.report.message());
  model.train();
  model.set_unpadded(packed);
  at::manual_seed(static_cast<uint64_t>(1000 + rank));  // dropout masks

  const Tokenizer tokenizer = Tokenizer::from_path(a.vocab, TokenizerOptions{});
  const TokenizedDataset data = build_dataset(read_mrpc(a.data), make_encoder(tokenizer, a.max_length), world.comm());
  DistributedSampler sampler(sampler_options(data.size(), a.batch_size, W, rank, a.seed));
  std::ifstream plan_file(a.batches);
  if (!plan_file) throw Error("--batches: cannot read " + a.batches);
  const nlohmann::json plan = nlohmann::json::parse(plan_file);
  const int total = a.warmup + a.steps, first = a.first_batch;
  if (static_cast<int>(plan["batches"].size()) < first + total)
    throw Error("--batches: fewer batches than first-batch + warmup + steps");
  if (first + total > sampler.num_batches()) throw Error("--first-batch: past the end of the epoch");
  for (int k = first; k < first + total; ++k)
    if (sampler.global_batch(k) != plan["batches"][k].get<std::vector<int64_t>>())
      throw Error(str_format("--batches: global batch %d differs from the sampler's (other seed, batch or world size?)", k));

  MpiCommunicator comm(world.comm());
  AdamWOptions adamw;
  adamw.lr = a.lr;
  ParallelConfig parallel;  // ddp, default buckets
  std::unique_ptr<Strategy> strategy = make_strategy(parallel, model, comm, adamw);
  strategy->broadcast_parameters(0);

  std::optional<TokenizedDataset> eval;
  if (!a.eval_data.empty())
    eval = build_dataset(read_mrpc(a.eval_data), make_encoder(tokenizer, a.max_length), world.comm());

  std::vector<double> losses, step_s, real_tokens;
  double first_step_s = -1;
  for (int k = first; k < first + total; ++k) {
    const std::vector<int64_t> rows = sampler.batch(k);
    wait_turn(a, rank);
    std::unique_ptr<torch::autograd::profiler::RecordProfile> profile;
    if (k + 1 == first + total && rank == 0 && !a.profile.empty())
      profile = std::make_unique<torch::autograd::profiler::RecordProfile>(a.profile);
    const auto start = Clock::now();
    // The trainer's step (train/train_step.h): collate, forward (packed or
    // padded as model.unpadded says), loss, backward, reduce, clip, AdamW.
    StepOptions options;
    options.lr = a.lr;
    options.max_grad_norm = 1.0;
    const StepResult r = train_step(*strategy, model, {collate(data, rows, tokenizer.pad_id())}, options);
    double reduced[2] = {r.loss, static_cast<double>(r.real_tokens)};
    ST_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, reduced, 2, MPI_DOUBLE, MPI_SUM, world.comm()));
    step_s.push_back(seconds_since(start));
    profile.reset();  // writes the trace
    if (first_step_s < 0) first_step_s = seconds_since(kProcessStart);
    losses.push_back(reduced[0] / W);
    real_tokens.push_back(reduced[1]);
    end_turn(a, rank);
  }

  double eval_s = -1;
  if (eval) {
    const EvalPlan eval_plan = make_eval_plan(eval->size(), a.eval_batch_size, W);
    model.eval();
    wait_turn(a, rank);
    ST_CHECK_MPI(MPI_Barrier(world.comm()));
    const auto start = Clock::now();
    {
      at::NoGradGuard no_grad;
      for (int64_t k = 0; k < eval_plan.num_batches; ++k)
        model.forward_batch(collate(*eval, eval_batch(eval_plan, rank, k), tokenizer.pad_id()));
    }
    ST_CHECK_MPI(MPI_Barrier(world.comm()));
    eval_s = seconds_since(start);
    end_turn(a, rank);
    model.train();
  }
  step_s = shardtrain_bench::max_over_ranks(step_s, world.comm());

  if (rank == 0) {
    const nlohmann::json doc = {{"side", "shardtrain"}, {"layout", a.layout}, {"ranks", W},
                                {"threads", world.num_threads()}, {"warmup", a.warmup}, {"losses", losses},
                                {"step_s", step_s}, {"real_tokens", real_tokens},
                                {"global_batch", a.batch_size * W}, {"time_to_first_step_s", first_step_s},
                                {"eval_s", eval_s < 0 ? nlohmann::json(nullptr) : nlohmann::json(eval_s)}};
    std::printf("%s\n", doc.dump().c_str());
    std::fflush(stdout);
  }
  return 0;
}

int run(World& world, int argc, char** argv) {
  CLI::App app{"shardtrain's side of benchmarks/side_by_side.sh"};
  app.require_subcommand(1);

  std::string model_name = "quickstart", out;
  int64_t init_seed = 42;
  CLI::App* init = app.add_subcommand("init", "write a randomly initialised model as a HF folder");
  init->add_option("--model", model_name, "quickstart, bert-base, modernbert-base or a HF config.json");
  init->add_option("--seed", init_seed, "init seed");
  init->add_option("--out", out, "folder")->required();

  std::string data;
  int64_t batch_size = 16, seed = 42;
  int world_size = 1, steps = 8;
  CLI::App* batches = app.add_subcommand("batches", "print the sampler's first global batches and the labels");
  batches->add_option("--data", data, "training TSV (MRPC columns)")->required();
  batches->add_option("--batch-size", batch_size, "per rank")->check(CLI::PositiveNumber);
  batches->add_option("--world", world_size, "ranks")->check(CLI::PositiveNumber);
  batches->add_option("--seed", seed, "sampler seed (train.seed)");
  batches->add_option("--steps", steps, "global batches to print")->check(CLI::PositiveNumber);
  batches->add_option("--out", out, "JSON file")->required();

  TrainArgs t;
  CLI::App* train = app.add_subcommand("train", "train on those batches with the library's model and DDP");
  train->add_option("--model-dir", t.model_dir, "HF folder from `init`")->required();
  train->add_option("--data", t.data, "training TSV")->required();
  train->add_option("--vocab", t.vocab, "vocab.txt, tokenizer.json or a model folder")->required();
  train->add_option("--max-length", t.max_length, "tokens per example")->check(CLI::PositiveNumber);
  train->add_option("--batches", t.batches, "JSON from `batches` (checked against the sampler)")->required();
  train->add_option("--batch-size", t.batch_size, "per rank")->check(CLI::PositiveNumber);
  train->add_option("--seed", t.seed, "sampler seed");
  train->add_option("--layout", t.layout, "packed (unpadded) or padded")->check(CLI::IsMember({"packed", "padded"}));
  train->add_option("--first-batch", t.first_batch, "start at this global batch")->check(CLI::NonNegativeNumber);
  train->add_option("--warmup", t.warmup, "untimed first steps")->check(CLI::NonNegativeNumber);
  train->add_option("--steps", t.steps, "timed steps")->check(CLI::PositiveNumber);
  train->add_option("--dropout", t.dropout, "override both dropout probabilities");
  train->add_option("--lr", t.lr, "constant learning rate");
  train->add_option("--eval-data", t.eval_data, "time one eval pass over this TSV");
  train->add_option("--eval-batch-size", t.eval_batch_size, "per rank")->check(CLI::PositiveNumber);
  train->add_option("--profile", t.profile, "write the last step as a Chrome trace (rank 0)");
  train->add_option("--turnstile", t.turnstile, "folder of the go.<rank> / done.<rank> FIFOs (side_by_side.sh)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (world.rank() == 0) return app.exit(e);
    return e.get_exit_code();
  }

  if (*init) {
    EncoderConfig config = resolve_model(model_name);
    config.set_num_labels(2);
    auto model = std::make_shared<TaskModel>(config);
    model->init_weights(static_cast<uint64_t>(init_seed));
    if (world.rank() == 0) save_hf_folder(*model, out);
    return 0;
  }
  if (*batches) {
    const RawTable table = read_mrpc(data);
    DistributedSampler sampler(sampler_options(table.size(), batch_size, world_size, 0, seed));
    nlohmann::json doc = {{"world_size", world_size}, {"batch_size", batch_size}, {"seed", seed},
                          {"labels", table.labels.class_ids}};
    doc["batches"] = nlohmann::json::array();
    for (int k = 0; k < std::min<int64_t>(steps, sampler.num_batches()); ++k) doc["batches"].push_back(sampler.global_batch(k));
    if (world.rank() == 0) write_json(doc, out);
    return 0;
  }
  return run_train(world, t);
}

}  // namespace

int main(int argc, char** argv) { return shardtrain_bench::bench_main("bench_side_by_side", argc, argv, run); }

}  // namespace bench_side_by_side

SHARDTRAIN_BENCH_REGISTER(bench_side_by_side)
