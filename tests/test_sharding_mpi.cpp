// ShardedStrategy — zero2, zero3, fsdp, hybrid, optimizer offload — against
// DDP, the reference (docs/DESIGN.md, "DDP is the reference"): same initial weights, same
// batches, several steps with accumulation (first micro-step without sync) and
// clipping; parameters, norms and AdamW state compared; memory really sharded
// and parameters really freed; checkpoints that move between strategies and
// world sizes with identical state; and the training job end to end. Runs at
// -np 2 and -np 4.
//
// Tolerances (fp32), as in test_zero_mpi.cpp: reduce-scatter adds the W terms
// in another order than DDP's all-reduce (~1 ulp of a gradient element), and
// the clip coefficient comes from a float64 sum of shard partials; AdamW's
// update is insensitive to that beyond a few ulp of lr. 2e-6 after 3 steps at
// lr 1e-2, where any wrong update moves a parameter by ~1e-2 (measured worst:
// 1.2e-6, zero2 at 2 ranks on an AVX-512 CPU).
#include <torch/torch.h>

#include <doctest/doctest.h>
#include <mpi.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "support/mpi_ranks.h"
#include "support/train_fixtures.h"
#include "shardtrain/checkpoint/checkpoint.h"
#include "shardtrain/train/checkpoint_manager.h"
#include "shardtrain/comm/mpi_communicator.h"
#include "shardtrain/core/check.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/parallel/ddp.h"
#include "shardtrain/parallel/sharded.h"
#include "shardtrain/parallel/make_strategy.h"
#include "shardtrain/train/train_checkpoint.h"
#include "shardtrain/train/trainer.h"

namespace fs = std::filesystem;
using namespace shardtrain;

namespace sharding_mpi_test {
using shardtrain_test::world_rank;
using shardtrain_test::world_size;

namespace {

constexpr double kParamTolerance = 2e-6;  // see the file comment
constexpr double kNormRelTolerance = 1e-5;
constexpr double kLr = 1e-2;
constexpr double kMaxGradNorm = 0.1;  // most steps clip, some do not
constexpr int kRowsPerWorldRank = 3;

std::shared_ptr<TaskModel> make_model(uint64_t seed) {
  auto model = std::make_shared<TaskModel>(shardtrain_test::tiny_bert_config());
  model->init_weights(seed);
  return model;
}

using Inputs = shardtrain_test::TinyInputs;

// The global batch of step s, micro-step m (kRowsPerWorldRank x world rows),
// and the rows that rank `r` of a job of `size` ranks trains on.
Inputs slice_of_global(int s, int m, int r, int size) {
  const int64_t rows = kRowsPerWorldRank * world_size();
  at::manual_seed(9000 + 13 * s + m);
  const at::Tensor ids = torch::randint(1, 50, {rows, 7}, torch::kInt64);
  const at::Tensor types = torch::randint(0, 2, {rows, 7}, torch::kInt64);
  const at::Tensor labels = torch::randint(0, 3, {rows}, torch::kInt64);
  REQUIRE(rows % size == 0);
  const int64_t per = rows / size;
  return {ids.narrow(0, r * per, per), types.narrow(0, r * per, per), labels.narrow(0, r * per, per)};
}

// One optimizer step of two micro-steps (the first without sync) as rank r of
// a job of `size` ranks. Returns the gradient norm.
double step_as(Strategy& strategy, TaskModel& model, int s, int r, int size) {
  return shardtrain_test::step_over(strategy, model, {slice_of_global(s, 0, r, size), slice_of_global(s, 1, r, size)},
                                    kLr, kMaxGradNorm);
}

double max_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

struct Variant {
  std::string label;
  ParallelConfig parallel;
  // Offload with the host copies forced on: the GPU pipeline's bookkeeping
  // (each unit's gradient chunk to the host when its last reduce-scatter
  // completes, AdamW chunk by chunk, parameters back) runs on the CPU.
  bool force_offload_copies = false;
};

std::vector<Variant> variants() {
  const int W = world_size();
  std::vector<Variant> out;
  auto add = [&](const std::string& label, const std::string& strategy) -> ParallelConfig& {
    Variant v;
    v.label = label;
    v.parallel.strategy = parse_enum<StrategyKind>(strategy, "parallel.strategy");
    v.parallel.zero.stage3_prefetch_bucket_size = 0;
    v.parallel.zero.stage3_param_persistence_threshold = 0;
    out.push_back(v);
    return out.back().parallel;
  };
  add("zero2", "zero2");
  add("zero3", "zero3");
  ParallelConfig& prefetch = add("zero3 prefetch + persistence", "zero3");
  prefetch.zero.stage3_prefetch_bucket_size = 1000;         // about two layers of the tiny model ahead
  prefetch.zero.stage3_param_persistence_threshold = 40;    // biases and LayerNorms (16) stay replicated
  add("zero3 without overlap", "zero3").zero.overlap_comm = false;
  add("zero3 reduce bucket", "zero3").zero.reduce_bucket_size = 3000;  // units go out in pairs
  ParallelConfig& fsdp = add("fsdp FULL_SHARD, forward prefetch, BACKWARD_POST", "fsdp");
  fsdp.fsdp.forward_prefetch = true;
  fsdp.fsdp.backward_prefetch = BackwardPrefetch::kBackwardPost;
  add("fsdp SHARD_GRAD_OP", "fsdp").fsdp.sharding_strategy = FsdpShardingStrategy::kShardGradOp;
  add("hybrid", "hybrid").ranks_per_node = W / 2;
  add("zero3 offload", "zero3").offload_optimizer = OffloadDevice::kCpu;
  for (const char* strategy : {"zero3", "zero2", "hybrid", "fsdp"}) {
    ParallelConfig& copies = add(std::string(strategy) + " offload with host copies", strategy);
    copies.offload_optimizer = OffloadDevice::kCpu;
    copies.ranks_per_node = W / 2;  // hybrid only
    out.back().force_offload_copies = true;
  }
  return out;
}

}  // namespace

TEST_CASE("zero2, zero3, fsdp and hybrid train exactly like DDP, with the state really sharded") {
  const int rank = world_rank(), W = world_size();
  MpiCommunicator comm(MPI_COMM_WORLD);
  AdamWOptions adamw;
  DdpOptions ddp_options;
  ddp_options.bucket_cap_mb = 0.004;

  for (const Variant& variant : variants()) {
    CAPTURE(variant.label);
    auto model = make_model(rank == 0 ? 5 : 7);  // differ on purpose: broadcast must fix it
    std::unique_ptr<Strategy> strategy;
    if (variant.force_offload_copies) {
      ShardOptions forced = shard_options_for(variant.parallel, Topology::assume(rank, W, W, variant.parallel));
      forced.force_offload_copies = true;
      strategy = std::make_unique<ShardedStrategy>(*model, comm, adamw, forced);
    } else {
      strategy = make_strategy(variant.parallel, *model, comm, adamw);
    }
    auto* sharded = dynamic_cast<ShardedStrategy*>(strategy.get());
    REQUIRE(sharded != nullptr);
    strategy->broadcast_parameters(0);

    auto reference_model = make_model(5);
    DataParallel reference(*reference_model, comm, adamw, ddp_options);
    const int64_t numel = reference.layout().numel();
    CHECK(at::equal(strategy->flat_params().narrow(0, 0, numel), reference.flat_params().narrow(0, 0, numel)));

    const ShardOptions options = shard_options_for(variant.parallel, Topology::assume(rank, W, W, variant.parallel));
    const bool stage3 = options.stage == 3;
    const int G = options.ranks_per_node > 0 && options.ranks_per_node < W ? options.ranks_per_node : W;
    bool clipped = false;
    for (int s = 0; s < 3; ++s) {
      CAPTURE(s);
      const double ddp_norm = step_as(reference, *reference_model, s, rank, W);
      const double norm = step_as(*strategy, *model, s, rank, W);
      clipped = clipped || ddp_norm > kMaxGradNorm;
      CHECK(std::abs(norm - ddp_norm) <= kNormRelTolerance * ddp_norm);
      const double diff = max_diff(strategy->flat_params().narrow(0, 0, numel), reference.flat_params().narrow(0, 0, numel));
      MESSAGE(variant.label << " at " << W << " ranks, step " << s << ": norm " << norm << " vs ddp " << ddp_norm
                            << ", max |param - ddp| " << diff);
      CHECK(diff <= kParamTolerance);
    }
    CHECK(clipped);
    CHECK(strategy->optimizer_step() == 3);

    // The AdamW state of every element this rank checkpoints equals DDP's.
    for (const FlatPart& part : strategy->checkpoint_parts()) {
      const int64_t n = part.params.numel();
      if (n == 0) continue;
      CHECK(max_diff(part.exp_avg.cpu(), reference.optimizer().exp_avg().narrow(0, part.begin, n)) <= 1e-7);
      CHECK(max_diff(part.exp_avg_sq.cpu(), reference.optimizer().exp_avg_sq().narrow(0, part.begin, n)) <= 1e-7);
      CHECK(max_diff(part.params.cpu(), reference.flat_params().narrow(0, part.begin, n)) <= kParamTolerance);
    }

    // Memory: the shard S is 1/G of every unit (padding aside).
    const int64_t S = sharded->shard_numel();
    const StrategyMemory memory = strategy->memory();
    CHECK(S * G >= numel);
    CHECK(S * G < numel + G * sharded->num_units());
    // Between steps only the reduced shard (and with the host copies, its
    // copy and the master copy of the parameters).
    const int64_t copies = variant.force_offload_copies ? 1 : 0;
    CHECK(memory.grad_bytes == 4 * S * (1 + copies));
    CHECK(memory.optimizer_bytes == (8 + 4 * copies) * S);
    CHECK(memory.host_bytes == 16 * S * copies);
    if (stage3 && options.persistence_threshold == 0) {
      CHECK(memory.param_bytes == 4 * S);
      CHECK(memory.peak_transient_bytes > 0);
      // Never the whole model's parameters and gradients at once; reducing
      // every micro-step, without prefetch and each collective completed at
      // once, not even the whole model's parameters.
      CHECK(memory.peak_transient_bytes < 8 * numel);
      if (options.reduce_every_micro_step && options.forward_prefetch_elements == 0 && !options.overlap_comm)
        CHECK(memory.peak_transient_bytes < 4 * numel);
      // Parameters really freed between steps: no memory under them.
      CHECK(model->parameter("classifier.weight").storage().nbytes() == 0);
      CHECK(model->unit_parameters(1).front().storage().nbytes() == 0);
    } else if (!stage3) {
      CHECK(memory.param_bytes == 4 * S * G);  // the gathered units; this rank's chunks are in them
      CHECK(model->parameter("classifier.weight").storage().nbytes() > 0);
    }

    const StrategyStats& stats = strategy->stats();
    // One reduce-scatter per unit per step, or per micro-step.
    CHECK(stats.buckets_total == (options.reduce_every_micro_step ? 6 : 3) * sharded->num_units());
    if (options.overlap_comm) CHECK(stats.buckets_during_backward > 0);
    if (stage3) {
      CHECK(stats.gathers_total > 0);
      CHECK((stats.gathers_prefetched > 0) == (options.forward_prefetch_elements + options.backward_prefetch_elements > 0));
    }
    CHECK(stats.bytes_sent > 0);

    // Inference on the sharded model: gathers each unit for its forward, frees it after.
    {
      at::NoGradGuard no_grad;
      model->eval();
      reference_model->eval();
      const Inputs in = slice_of_global(7, 0, 0, 1);
      const double diff = max_diff(model->forward(in.ids, in.types), reference_model->forward(in.ids, in.types));
      CHECK(diff <= 1e-5);
      if (stage3 && options.persistence_threshold == 0)
        CHECK(model->unit_parameters(1).front().storage().nbytes() == 0);
      model->train();
    }
  }
}

namespace {

// Collective over `comm`: the whole of a checkpoint (parameters and AdamW
// state, layout order) on every rank.
FlatPart read_whole(const std::string& path, const ParamLayout& layout, MPI_Comm comm) {
  CheckpointReader reader(path, comm);
  FlatPart whole;
  const at::TensorOptions f32 = at::TensorOptions().dtype(at::kFloat);
  whole.params = at::empty({layout.numel()}, f32);
  whole.exp_avg = at::empty({layout.numel()}, f32);
  whole.exp_avg_sq = at::empty({layout.numel()}, f32);
  read_train_part(reader, flat_tensors(layout), whole);
  return whole;
}

void write_checkpoint(const std::string& path, Strategy& strategy, MPI_Comm comm) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  TrainState state;
  state.step = strategy.optimizer_step();
  state.world_size = size;
  state.strategy = strategy.name();
  write_train_checkpoint(path, flat_tensors(strategy.layout()), strategy.checkpoint_parts(), state, comm);
}

}  // namespace

TEST_CASE("a zero3 checkpoint resumes under other strategies and world sizes with identical state") {
  const int rank = world_rank(), W = world_size();
  const std::string dir = shardtrain_test::make_shared_temp_dir("sharding_reshard");
  MpiCommunicator comm(MPI_COMM_WORLD);
  AdamWOptions adamw;

  // The writer: zero3 with prefetch and persistent parameters (the most
  // scattered ownership), W ranks, 2 steps, a checkpoint, then a third step.
  ParallelConfig writer_config;
  writer_config.strategy = StrategyKind::kZero3;
  writer_config.zero.stage3_prefetch_bucket_size = 1000;
  writer_config.zero.stage3_param_persistence_threshold = 40;
  auto model = make_model(5);
  std::unique_ptr<Strategy> writer = make_strategy(writer_config, *model, comm, adamw);
  for (int s = 0; s < 2; ++s) step_as(*writer, *model, s, rank, W);
  const std::string written = dir + "/zero3.h5";
  write_checkpoint(written, *writer, MPI_COMM_WORLD);
  step_as(*writer, *model, 2, rank, W);
  const int64_t numel = writer->layout().numel();
  const at::Tensor after = writer->flat_params().narrow(0, 0, numel).clone();

  // (strategy, ranks): at -np 4 the ddp at 2 and zero2 at 3 ranks.
  struct Reader {
    std::string strategy;
    int ranks;
    int64_t ranks_per_node;
  };
  const std::vector<Reader> readers = {
      {"ddp", W / 2, 0}, {"zero2", W == 4 ? 3 : 1, 0}, {"zero1", W, 0}, {"hybrid", W, W / 2}, {"zero3", 1, 0}};
  for (const Reader& r : readers) {
    CAPTURE(r.strategy);
    CAPTURE(r.ranks);
    MPI_Comm job;
    MPI_Comm_split(MPI_COMM_WORLD, rank < r.ranks ? 0 : MPI_UNDEFINED, rank, &job);
    if (rank < r.ranks) {
      MpiCommunicator job_comm(job);
      ParallelConfig config;
      config.strategy = parse_enum<StrategyKind>(r.strategy, "parallel.strategy");
      config.ranks_per_node = r.ranks_per_node;
      auto fresh = make_model(11);
      std::unique_ptr<Strategy> reader = make_strategy(config, *fresh, job_comm, adamw);
      reader->broadcast_parameters(0);  // as the trainer does before it loads
      {
        CheckpointReader file(written, job);
        std::vector<FlatPart> parts = reader->checkpoint_parts();
        read_train_parts(file, flat_tensors(reader->layout()), parts, true);
        reader->finish_load(read_train_state(file).step);
      }
      CHECK(reader->optimizer_step() == 2);
      // Identical state after loading: what the reader writes back is the writer's file, bit for bit.
      const std::string rewritten = dir + "/" + r.strategy + "_" + std::to_string(r.ranks) + ".h5";
      write_checkpoint(rewritten, *reader, job);
      const FlatPart a = read_whole(written, reader->layout(), job);
      const FlatPart b = read_whole(rewritten, reader->layout(), job);
      CHECK(at::equal(a.params, b.params));
      CHECK(at::equal(a.exp_avg, b.exp_avg));
      CHECK(at::equal(a.exp_avg_sq, b.exp_avg_sq));
      CHECK(at::equal(reader->flat_params().narrow(0, 0, numel).cpu(), a.params));

      // And it trains on: the third step (same global batch, split over r.ranks) lands where the writer's did.
      step_as(*reader, *fresh, 2, rank, r.ranks);
      const double diff = max_diff(reader->flat_params().narrow(0, 0, numel), after);
      MESSAGE("zero3 at " << W << " ranks -> " << r.strategy << " at " << r.ranks
                          << " ranks: max |param - writer| after a step " << diff);
      CHECK(diff <= kParamTolerance);
      MPI_Comm_free(&job);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  shardtrain_test::remove_shared_dir(dir);
}

namespace {

// tests/support/train_fixtures.h's run, dropout off, no eval, one epoch.
RunConfig end_to_end_config(const std::string& dir) {
  RunConfig c = shardtrain_test::tiny_run_config(dir);
  c.model.hidden_dropout_prob = 0.0;
  c.model.attention_probs_dropout_prob = 0.0;
  c.data.eval_file.clear();
  c.train.num_epochs = 1;
  c.train.gradient_accumulation_steps = 2;
  c.checkpoint.every_epochs = 0;
  return c;
}

}  // namespace

TEST_CASE("train() with zero3, fsdp, hybrid and offload ends like ddp; a zero3 run resumes as hybrid") {
  const int rank = world_rank(), W = world_size();
  const std::string dir = shardtrain_test::make_shared_temp_dir("sharding_train");
  RunConfig config = end_to_end_config(dir);
  config.run.name = "ddp";
  const TrainResult ddp = train(config, MPI_COMM_WORLD, shardtrain_test::quiet_train_options());
  REQUIRE(ddp.finished);
  REQUIRE(ddp.steps >= 3);

  std::vector<std::pair<std::string, ParallelConfig>> runs;
  ParallelConfig p;
  p.strategy = StrategyKind::kZero3;
  runs.emplace_back("zero3", p);
  p.offload_optimizer = OffloadDevice::kCpu;
  runs.emplace_back("zero3_offload", p);
  p = ParallelConfig{};
  p.strategy = StrategyKind::kFsdp;
  runs.emplace_back("fsdp", p);
  p = ParallelConfig{};
  p.strategy = StrategyKind::kHybrid;
  p.ranks_per_node = W / 2;
  runs.emplace_back("hybrid", p);
  for (const auto& run : runs) {
    CAPTURE(run.first);
    config.run.name = run.first;
    config.parallel = run.second;
    const TrainResult result = train(config, MPI_COMM_WORLD, shardtrain_test::quiet_train_options());
    CHECK(result.finished);
    CHECK(result.steps == ddp.steps);
    const double diff = max_diff(result.final_params, ddp.final_params);
    MESSAGE("train() " << run.first << " vs ddp at " << W << " ranks: max |param difference| " << diff);
    CHECK(diff < 1e-5);  // test_train_mpi.cpp's bound for a whole run
  }

  // zero3 stopped after the checkpoint of step 2, resumed as hybrid.
  config.run.name = "moved";
  config.parallel = ParallelConfig{};
  config.parallel.strategy = StrategyKind::kZero3;
  config.checkpoint.every_steps = 2;
  TrainOptions stop = shardtrain_test::quiet_train_options();
  stop.stop_after_step = 3;
  CHECK_FALSE(train(config, MPI_COMM_WORLD, stop).finished);
  // Stage 3 with every parameter below the persistence threshold (all of
  // this tiny model's) resumed as itself, and stage 2 resumed as itself.
  for (const std::string strategy : {"zero3", "zero2"}) {
    RunConfig same = config;
    same.run.name = "same_" + strategy;
    same.parallel.strategy = parse_enum<StrategyKind>(strategy, "parallel.strategy");
    CHECK_FALSE(train(same, MPI_COMM_WORLD, stop).finished);
    const TrainResult again = train(same, MPI_COMM_WORLD, shardtrain_test::quiet_train_options());
    const double same_diff = max_diff(again.final_params, ddp.final_params);
    MESSAGE(strategy << " resumed as " << strategy << " at " << W << " ranks: max |param difference| " << same_diff);
    CHECK(same_diff < 1e-5);
  }
  config.parallel.strategy = StrategyKind::kHybrid;
  config.parallel.ranks_per_node = W / 2;
  const TrainResult resumed = train(config, MPI_COMM_WORLD, shardtrain_test::quiet_train_options());
  CHECK(resumed.finished);
  CHECK(resumed.resumed_from == checkpoint_path(dir + "/moved", 1));
  const double diff = max_diff(resumed.final_params, ddp.final_params);
  MESSAGE("zero3 resumed as hybrid at " << W << " ranks: max |param difference| " << diff);
  CHECK(diff < 1e-5);
  (void)rank;
  shardtrain_test::remove_shared_dir(dir);
}

}  // namespace sharding_mpi_test
