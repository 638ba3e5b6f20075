// ZeroStrategy (stage 1) against DDP, the reference (docs/DESIGN.md, "DDP is the reference"):
// same initial weights, same per-rank batches, K steps, parameters and
// gradient norms compared after every step; optimizer state really sharded;
// checkpoints exchanged between ddp / zero1 / zero2 and world sizes; and the
// training job end to end. Runs at -np 2 and -np 4. (Stage 2 and 3, FSDP and
// hybrid against DDP: test_sharding_mpi.cpp.)
//
// Tolerances (fp32). Stage 1 reduces the same buckets with the same all-reduce
// as DDP and AdamW is elementwise, so the gradients are identical and only the
// global norm differs (float64 sum of W shard partials instead of one sum:
// ~1e-16 relative), which reaches the float32 clip coefficient at most as one
// rounding step. Stage 2 sums with reduce-scatter: for W > 2 MPI may add the W
// terms in another order, ~1 ulp (6e-8 relative) of a gradient element.
// AdamW's update lr * m / (sqrt(v) + eps) is insensitive to a relative change
// of the gradient of that size beyond a few ulp of lr, plus one ulp of the
// parameter (|p| < 1): per step well under 1e-7 at lr 1e-2. So 1e-6 after 3
// steps; an update that is wrong at all moves parameters by ~lr = 1e-2.
#include <torch/torch.h>

#include <doctest/doctest.h>
#include <mpi.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
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
#include "shardtrain/parallel/make_strategy.h"
#include "shardtrain/parallel/zero1.h"
#include "shardtrain/train/train_checkpoint.h"
#include "shardtrain/train/trainer.h"

namespace fs = std::filesystem;
using namespace shardtrain;

// Everything in a file namespace: the *_mpi tests are compiled together (unity build).
namespace zero_mpi_test {
using shardtrain_test::world_rank;
using shardtrain_test::world_size;
using shardtrain_test::error_of;

namespace {

constexpr double kParamTolerance = 1e-6;  // see the file comment
constexpr double kNormRelTolerance = 1e-5;
constexpr double kLr = 1e-2;
constexpr double kMaxGradNorm = 0.1;  // the norms here are 0.05-0.23: most steps clip, some do not

EncoderConfig tiny() { return shardtrain_test::tiny_bert_config(); }

using Inputs = shardtrain_test::TinyInputs;

// Data-rank r's micro-batch m of optimizer step s: deterministic, different for every (r, s, m).
Inputs inputs_for(int r, int s, int m) {
  at::manual_seed(5000 + 101 * r + 7 * s + m);
  Inputs in;
  in.ids = torch::randint(1, 50, {3, 7}, torch::kInt64);
  in.types = torch::randint(0, 2, {3, 7}, torch::kInt64);
  in.labels = torch::randint(0, 3, {3}, torch::kInt64);
  return in;
}

// The batches of data-ranks [first, first + count) as one batch: with equal
// batch sizes, the mean loss over it is the average of their mean losses.
Inputs concatenated(int first, int count, int s, int m) {
  std::vector<at::Tensor> ids, types, labels;
  for (int r = first; r < first + count; ++r) {
    Inputs in = inputs_for(r, s, m);
    ids.push_back(in.ids);
    types.push_back(in.types);
    labels.push_back(in.labels);
  }
  return {torch::cat(ids), torch::cat(types), torch::cat(labels)};
}

std::shared_ptr<TaskModel> make_model(uint64_t seed) {
  auto model = std::make_shared<TaskModel>(tiny());
  model->init_weights(seed);
  return model;
}

// One optimizer step of two accumulated micro-steps (the first without sync),
// this rank standing for data-ranks [first, first + count). Returns the norm.
double step_as(Strategy& strategy, TaskModel& model, int first, int count, int s) {
  return shardtrain_test::step_over(strategy, model, {concatenated(first, count, s, 0), concatenated(first, count, s, 1)},
                                    kLr, kMaxGradNorm);
}

double max_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

// A fresh folder shared by all ranks.
std::string temp_dir(const std::string& name) { return shardtrain_test::make_shared_temp_dir("zero_" + name); }

ZeroOptions zero_options(int64_t allgather_bucket_size) {
  ZeroOptions o;
  o.bucket_cap_mb = 0.004;  // ~1000 floats: many buckets
  o.allgather_bucket_size = allgather_bucket_size;
  return o;
}

// parallel.strategy = name, buckets as small as zero_options'.
std::unique_ptr<Strategy> strategy_named(StrategyKind kind, TaskModel& model,
                                         Communicator& comm) {
  ParallelConfig parallel;
  parallel.strategy = kind;
  parallel.bucket_cap_mb = 0.004;
  return make_strategy(parallel, model, comm, AdamWOptions{});
}

}  // namespace

TEST_CASE("ZeRO stage 1 trains exactly like DDP, with the optimizer state sharded") {
  const int rank = world_rank(), W = world_size();
  MpiCommunicator comm(MPI_COMM_WORLD);
  AdamWOptions adamw;

  auto ddp_model = make_model(rank == 0 ? 5 : 6);  // differ on purpose: broadcast must fix it
  DdpOptions ddp_options;
  ddp_options.bucket_cap_mb = 0.004;
  DataParallel ddp(*ddp_model, comm, adamw, ddp_options);
  ddp.broadcast_parameters(0);

  // The post-step all-gather in one piece, in pieces of 100 elements per
  // rank, and optimizer offload with its host copies forced on (the GPU
  // pipeline's bookkeeping: gradients to the host in pieces, AdamW piece by
  // piece, parameters back).
  for (int variant = 0; variant < 3; ++variant) {
    const int64_t allgather = variant == 1 ? 100 : 0;
    const bool offload = variant == 2;
    CAPTURE(allgather);
    CAPTURE(offload);
    auto model = make_model(rank == 0 ? 5 : 7);
    ZeroOptions options = zero_options(allgather);
    options.offload_optimizer = options.force_offload_copies = offload;
    ZeroStrategy zero(*model, comm, adamw, options);
    zero.broadcast_parameters(0);
    CHECK(zero.name() == "zero1");
    CHECK(at::equal(zero.flat_params(), ddp.flat_params()));

    // Memory really sharded: AdamW state for 1/W of the padded buffer.
    const int64_t padded = zero.layout().padded_numel(W);
    CHECK(zero.flat_params().numel() == padded);
    CHECK(zero.shard() == zero.layout().shard_range(rank, W));
    CHECK(zero.optimizer().numel() == padded / W);
    CHECK(zero.optimizer().exp_avg().numel() == padded / W);
    CHECK(zero.optimizer().exp_avg_sq().numel() == padded / W);
    CHECK(zero.shard_grads().numel() == padded / W);

    // DDP from the same start, step by step (its state is rewound by rebuilding it per stage).
    auto reference_model = make_model(5);
    DataParallel reference(*reference_model, comm, adamw, ddp_options);
    const at::Tensor initial = zero.flat_params().clone();
    bool clipped = false;
    for (int s = 0; s < 3; ++s) {
      CAPTURE(s);
      const double ddp_norm = step_as(reference, *reference_model, rank, 1, s);
      const double zero_norm = step_as(zero, *model, rank, 1, s);
      clipped = clipped || ddp_norm > kMaxGradNorm;
      CHECK(std::abs(zero_norm - ddp_norm) <= kNormRelTolerance * ddp_norm);
      const double diff = max_diff(zero.flat_params(), reference.flat_params());
      MESSAGE("allgather_bucket_size " << allgather << " step " << s << ": norm " << zero_norm << " vs ddp " << ddp_norm
                       << ", max |param - ddp| " << diff);
      CHECK(diff <= kParamTolerance);
      // The module's parameters are views of the gathered buffer: every rank has all of them.
      CHECK(model->parameter("classifier.weight").data_ptr() ==
            zero.flat_params().narrow(0, zero.layout().slot("classifier.weight").offset, 1).data_ptr());
      at::Tensor root = zero.flat_params().clone();
      comm.broadcast(root, 0);
      CHECK(at::equal(root, zero.flat_params()));
    }
    CHECK(clipped);  // the clipping path ran (the test would not see a wrong norm otherwise)
    CHECK(zero.optimizer_step() == 3);
    CHECK(max_diff(zero.flat_params(), initial) > kLr / 2);  // training moved the parameters

    // Same AdamW state as DDP's over this rank's shard (checkpoint_part covers S_r for both).
    const FlatPart mine = zero.checkpoint_parts().front();
    const FlatPart theirs = reference.checkpoint_parts().front();
    REQUIRE(mine.begin == theirs.begin);
    REQUIRE(mine.params.numel() == theirs.params.numel());
    CHECK(max_diff(mine.exp_avg, theirs.exp_avg) <= 1e-7);  // |m| ~ |g| < 1: ulps of it
    CHECK(max_diff(mine.exp_avg_sq, theirs.exp_avg_sq) <= 1e-7);

    // Checkpoint parts tile the layout in rank order.
    int64_t mine_range[2] = {mine.begin, mine.params.numel()};
    std::vector<int64_t> all(2 * W);
    MPI_Allgather(mine_range, 2, MPI_INT64_T, all.data(), 2, MPI_INT64_T, MPI_COMM_WORLD);
    int64_t expected_begin = 0;
    for (int r = 0; r < W; ++r) {
      CHECK(all[2 * r] == expected_begin);
      expected_begin += all[2 * r + 1];
    }
    CHECK(expected_begin == zero.layout().numel());
    CHECK(mine.exp_avg.numel() == mine.params.numel());

    CHECK(zero.stats().buckets_during_backward > 0);  // reduced from the hooks while backward ran
    // Memory as the ZeRO paper counts stage 1: params and grads whole, AdamW 1/W.
    // Offload adds the host copies of the slice's parameters and gradients.
    CHECK(zero.memory().param_bytes == 4 * padded);
    CHECK(zero.memory().grad_bytes == 4 * padded + (offload ? 4 * padded / W : 0));
    CHECK(zero.memory().optimizer_bytes == (offload ? 12 : 8) * padded / W);
    CHECK(zero.memory().host_bytes == (offload ? 16 * padded / W : 0));
  }
}

TEST_CASE("checkpoints move between ddp, zero1 and zero2, also to another world size") {
  const int rank = world_rank(), W = world_size();
  const std::string dir = temp_dir("exchange");
  MpiCommunicator comm(MPI_COMM_WORLD);

  // The reader job: the first W/2 ranks (np 2: one rank), each standing for two writer ranks.
  const int reader_size = W / 2;
  const bool reads = rank < reader_size;
  MPI_Comm reader_comm;
  MPI_Comm_split(MPI_COMM_WORLD, reads ? 0 : MPI_UNDEFINED, rank, &reader_comm);

  const std::vector<std::pair<std::string, std::string>> pairs = {
      {"ddp", "zero2"}, {"zero2", "ddp"}, {"zero1", "zero2"}, {"zero2", "zero1"}};
  auto kind = [](const std::string& name) { return parse_enum<StrategyKind>(name, "parallel.strategy"); };
  for (const auto& pair : pairs) {
    const std::string& writer_name = pair.first;
    const std::string& reader_name = pair.second;
    CAPTURE(writer_name);
    CAPTURE(reader_name);
    const std::string path = dir + "/" + writer_name + "_to_" + reader_name + ".h5";

    // Writer: W ranks, 2 steps, checkpoint, then a third step (the reference).
    auto model = make_model(5);
    std::unique_ptr<Strategy> writer = strategy_named(kind(writer_name), *model, comm);
    CHECK(writer->name() == writer_name);
    for (int s = 0; s < 2; ++s) step_as(*writer, *model, rank, 1, s);
    TrainState state;
    state.step = writer->optimizer_step();
    state.world_size = W;
    state.strategy = writer->name();
    write_train_checkpoint(path, flat_tensors(writer->layout()), writer->checkpoint_parts(), state, MPI_COMM_WORLD);
    const at::Tensor saved = writer->flat_params().clone();
    step_as(*writer, *model, rank, 1, 2);
    const at::Tensor after = writer->flat_params().clone();

    // Same world size, the reader strategy: the state it loads continues identically.
    {
      auto fresh = make_model(9);
      std::unique_ptr<Strategy> reader = strategy_named(kind(reader_name), *fresh, comm);
      CheckpointReader file(path, MPI_COMM_WORLD);
      CHECK(read_train_state(file).strategy == writer_name);
      std::vector<FlatPart> parts = reader->checkpoint_parts();
      read_train_parts(file, flat_tensors(reader->layout()), parts, true);
      reader->finish_load(read_train_state(file).step);
      CHECK(reader->optimizer_step() == 2);
      CHECK(at::equal(reader->flat_params(), saved));  // float32 stored as float32: exact
      step_as(*reader, *fresh, rank, 1, 2);
      const double diff = max_diff(reader->flat_params(), after);
      MESSAGE(writer_name << " -> " << reader_name << " at " << W << " ranks: max |param - writer| after a step "
                          << diff);
      CHECK(diff <= kParamTolerance);
    }

    // W/2 ranks: rank r takes the batches of writer ranks 2r and 2r+1 (same global batch).
    if (reads) {
      MpiCommunicator half(reader_comm);
      auto fresh = make_model(11);
      std::unique_ptr<Strategy> reader = strategy_named(kind(reader_name), *fresh, half);
      CheckpointReader file(path, reader_comm);
      std::vector<FlatPart> parts = reader->checkpoint_parts();
      read_train_parts(file, flat_tensors(reader->layout()), parts, true);
      reader->finish_load(read_train_state(file).step);
      const int64_t numel = reader->layout().numel();
      CHECK(at::equal(reader->flat_params().narrow(0, 0, numel), saved.narrow(0, 0, numel)));
      step_as(*reader, *fresh, 2 * rank, 2, 2);
      // One mean over 6 examples instead of two means over 3 averaged: fp32 sums in another order.
      const double diff = max_diff(reader->flat_params().narrow(0, 0, numel), after.narrow(0, 0, numel));
      MESSAGE(writer_name << " at " << W << " ranks -> " << reader_name << " at " << reader_size
                          << " ranks: max |param - writer| after a step " << diff);
      CHECK(diff <= kParamTolerance);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  if (reads) MPI_Comm_free(&reader_comm);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) fs::remove_all(dir);
}

TEST_CASE("make_strategy builds every parallel.strategy and refuses what does not exist") {
  MpiCommunicator comm(MPI_COMM_WORLD);
  const int W = world_size();
  auto built = [&](ParallelConfig parallel) {
    auto model = make_model(5);
    return make_strategy(parallel, *model, comm, AdamWOptions{})->name();
  };
  ParallelConfig p;
  for (const std::string name : {"ddp", "zero1", "zero2", "zero3"}) {
    p.strategy = parse_enum<StrategyKind>(name, "parallel.strategy");
    CHECK(built(p) == name);
  }
  p.strategy = StrategyKind::kHybrid;
  p.ranks_per_node = W / 2;
  CHECK(built(p) == "hybrid");
  p.ranks_per_node = W;  // one node: nothing to replicate across, full sharding
  CHECK(built(p) == "zero3");
  p.ranks_per_node = 3;  // does not divide 2 or 4
  CHECK(error_of([&] { built(p); }).find("parallel.ranks_per_node") != std::string::npos);
  p = ParallelConfig{};
  p.strategy = StrategyKind::kFsdp;
  const std::vector<std::pair<std::string, std::string>> fsdp = {
      {"FULL_SHARD", "zero3"}, {"SHARD_GRAD_OP", "zero2"}, {"NO_SHARD", "ddp"}};
  for (const auto& pair : fsdp) {
    p.fsdp.sharding_strategy = parse_enum<FsdpShardingStrategy>(pair.first, "parallel.fsdp.sharding_strategy");
    CHECK(built(p) == pair.second);
  }
  // Names that are not choices never get this far: the config parser refuses them.
  CHECK(error_of([&] { parse_enum<FsdpShardingStrategy>("FULL", "parallel.fsdp.sharding_strategy"); }) ==
        "parallel.fsdp.sharding_strategy = 'FULL': allowed values are \"FULL_SHARD\", \"SHARD_GRAD_OP\", "
        "\"NO_SHARD\", \"HYBRID_SHARD\"");
  p = ParallelConfig{};
  p.offload_optimizer = OffloadDevice::kCpu;
  CHECK(error_of([&] { built(p); }).find("needs a sharded strategy") != std::string::npos);
  // fsdp's NO_SHARD is ddp underneath: the message names NO_SHARD, not ddp.
  p.strategy = StrategyKind::kFsdp;
  p.fsdp.sharding_strategy = FsdpShardingStrategy::kNoShard;
  CHECK(error_of([&] { built(p); }).find("\"NO_SHARD\": NO_SHARD shards nothing") != std::string::npos);
}

// ---- the training job end to end (helpers as in test_train_mpi.cpp) ----

namespace {

// tests/support/train_fixtures.h's run, dropout off, no eval, one epoch.
RunConfig tiny_config(const std::string& dir) {
  RunConfig c = shardtrain_test::tiny_run_config(dir);
  c.model.hidden_dropout_prob = 0.0;  // dropout masks depend on the rank: off, to compare world sizes
  c.model.attention_probs_dropout_prob = 0.0;
  c.data.eval_file.clear();
  c.train.num_epochs = 1;
  c.train.max_grad_norm = 1.0;
  c.checkpoint.every_epochs = 0;
  return c;
}

TrainOptions quiet() { return shardtrain_test::quiet_train_options(); }

}  // namespace

TEST_CASE("train() with zero1 / zero2 ends like ddp; a ddp checkpoint resumes with zero2 on fewer ranks") {
  const int rank = world_rank(), W = world_size();
  const std::string dir = temp_dir("train");
  RunConfig config = tiny_config(dir);

  config.run.name = "ddp";
  const TrainResult ddp = train(config, MPI_COMM_WORLD, quiet());
  REQUIRE(ddp.finished);
  REQUIRE(ddp.steps >= 6);
  // fp32, 24/W steps at lr 1e-3: the same argument as the file comment, with
  // test_train_mpi.cpp's 1e-5 bound for a whole run.
  for (const std::string name : {"zero1", "zero2"}) {
    config.run.name = name;
    config.parallel.strategy = parse_enum<StrategyKind>(name, "parallel.strategy");
    const TrainResult zero = train(config, MPI_COMM_WORLD, quiet());
    CHECK(zero.finished);
    CHECK(zero.steps == ddp.steps);
    const double diff = max_diff(zero.final_params, ddp.final_params);
    MESSAGE("train() " << name << " vs ddp at " << W << " ranks: max |param difference| " << diff);
    CHECK(diff < 1e-5);
  }

  // ddp on W ranks stopped after the checkpoint of step 3, resumed with zero2
  // on W/2 ranks with twice the per-rank batch (same global batch).
  config.run.name = "moved";
  config.parallel.strategy = StrategyKind::kDdp;
  config.checkpoint.every_steps = 3;
  TrainOptions stop = quiet();
  stop.stop_after_step = 4;
  const TrainResult first = train(config, MPI_COMM_WORLD, stop);
  CHECK_FALSE(first.finished);
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, rank < W / 2 ? 0 : MPI_UNDEFINED, rank, &half);
  if (rank < W / 2) {
    RunConfig resumed = config;
    resumed.parallel.strategy = StrategyKind::kZero2;
    resumed.train.batch_size = config.train.batch_size * 2;
    const TrainResult second = train(resumed, half, quiet());
    CHECK(second.finished);
    CHECK(second.resumed_from == checkpoint_path(dir + "/moved", 1));
    CHECK(second.steps == ddp.steps);
    const double diff = max_diff(second.final_params, ddp.final_params);
    MESSAGE("ddp at " << W << " ranks resumed with zero2 at " << W / 2 << " ranks: max |param difference| " << diff);
    CHECK(diff < 1e-5);
    MPI_Comm_free(&half);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) fs::remove_all(dir);
}

}  // namespace zero_mpi_test
