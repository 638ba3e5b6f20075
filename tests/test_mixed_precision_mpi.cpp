// Mixed precision at -np 2 and -np 4 (docs/DESIGN.md, "Mixed precision"):
// every strategy in bf16 trains like DDP in bf16 (same batches, accumulation,
// clipping), with 16-bit parameters and gradients, an fp32 master in the
// checkpoints, the ZeRO paper's mixed-precision memory and 16-bit
// communication; a bf16 checkpoint resumes in fp32 and the other way round;
// FSDP's reduce_dtype fp32.
//
// Tolerances. The strategies round differently on the way to the same
// gradients: zero2 / zero3 reduce-scatter every micro-step and accumulate the
// reduced bf16 shard (DeepSpeed), DDP accumulates its local bf16 gradients and
// reduces once (no_sync); and at -np 4 the reductions combine the ranks in
// different orders, each combination rounded to bf16 (8 significant bits).
// So a gradient element may differ by a few bf16 ulps, 2^-8 relative each.
// AdamW's update is lr * m_hat / sqrt(v_hat): a relative change d of the
// gradients moves it by about lr * d per step, so after 3 steps at lr 1e-2 the
// fp32 masters agree to about 3 * 1e-2 * 4 * 2^-8 ~ 5e-4 on average; where a
// gradient element is so small that a rounding flips its sign, the update
// flips (up to 2 lr), so single elements may be off by more. The bounds: the
// mean |difference| of each tensor <= 1e-3, and fewer than 2 % of all
// elements beyond 5e-3. A wrong update (a unit not reduced, a missing scale)
// puts every element of a tensor ~lr = 1e-2 off, ten times the first bound.
// Measured (mean |diff| of the worst tensor / share of all elements beyond
// 5e-3): zero1, fsdp and hybrid 0 / 0 at -np 2 and 4 (they reduce as DDP
// does); zero2 / zero3 1.6e-4 / 0.07 % at -np 2, 4.5e-4 / 0.25 % at -np 4.
#include <torch/torch.h>

#include <doctest/doctest.h>
#include <mpi.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "shardtrain/checkpoint/checkpoint.h"
#include "shardtrain/comm/mpi_communicator.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/parallel/ddp.h"
#include "shardtrain/parallel/make_strategy.h"
#include "shardtrain/parallel/sharded.h"
#include "shardtrain/train/checkpoint_manager.h"
#include "shardtrain/train/train_checkpoint.h"
#include "shardtrain/train/trainer.h"
#include "support/mpi_ranks.h"
#include "support/train_fixtures.h"

using namespace shardtrain;

namespace mixed_precision_mpi_test {
using shardtrain_test::world_rank;
using shardtrain_test::world_size;

namespace {

constexpr double kLr = 1e-2;
constexpr double kMaxGradNorm = 0.1;
constexpr double kMeanTolerance = 1e-3;  // see the file comment
constexpr double kFarDiff = 5e-3;
constexpr double kFarShare = 0.02;

MixedPrecision bf16() {
  MixedPrecision p;
  p.param_dtype = p.reduce_dtype = at::kBFloat16;
  return p;
}

std::shared_ptr<TaskModel> make_model(uint64_t seed) {
  auto model = std::make_shared<TaskModel>(shardtrain_test::tiny_bert_config());
  model->init_weights(seed);
  return model;
}

// Data-rank r's micro-batch m of step s: the same for every strategy.
shardtrain_test::TinyInputs inputs_for(int r, int s, int m) {
  at::manual_seed(7000 + 101 * r + 7 * s + m);
  return {torch::randint(1, 50, {3, 7}, torch::kInt64), torch::randint(0, 2, {3, 7}, torch::kInt64),
          torch::randint(0, 3, {3}, torch::kInt64)};
}

double step_on(Strategy& strategy, TaskModel& model, int s) {
  return shardtrain_test::step_over(strategy, model, {inputs_for(world_rank(), s, 0), inputs_for(world_rank(), s, 1)},
                                    kLr, kMaxGradNorm);
}

// One step on a sub-communicator's ranks: the inputs of data-ranks 2r and 2r+1
// (the same global batch as the whole job's).
double step_on_comm(Strategy& strategy, TaskModel& model, Communicator& comm) {
  auto both = [&](int m) {
    const auto a = inputs_for(2 * comm.rank(), 9, m), b = inputs_for(2 * comm.rank() + 1, 9, m);
    return shardtrain_test::TinyInputs{at::cat({a.ids, b.ids}), at::cat({a.types, b.types}), at::cat({a.labels, b.labels})};
  };
  return shardtrain_test::step_over(strategy, model, {both(0), both(1)}, kLr, kMaxGradNorm);
}

// Collective: the fp32 values a strategy checkpoints (its master under mixed
// precision), whole, on every rank, through a checkpoint file.
at::Tensor master_of(Strategy& strategy, const std::string& path) {
  TrainState state;
  state.step = strategy.optimizer_step();
  state.world_size = world_size();
  write_train_checkpoint(path, flat_tensors(strategy.layout()), strategy.checkpoint_parts(), state, MPI_COMM_WORLD);
  CheckpointReader reader(path, MPI_COMM_WORLD);
  FlatPart whole;
  whole.params = at::empty({strategy.layout().numel()}, at::kFloat);
  read_train_part(reader, flat_tensors(strategy.layout()), whole);
  return whole.params;
}

// Every tensor's mean |difference| and the share of far elements within the bounds.
void check_close(const at::Tensor& a, const at::Tensor& b, const ParamLayout& layout, const std::string& what) {
  const at::Tensor diff = (a - b).abs();
  for (const ParamSlot& slot : layout.slots()) {
    const double mean = diff.narrow(0, slot.offset, slot.numel).mean().item<double>();
    if (std::getenv("SHOW_DIFFS") || mean > kMeanTolerance) MESSAGE(what << ": " << slot.name << " mean |diff| " << mean);
    CHECK(mean <= kMeanTolerance);
  }
  const double far = (diff > kFarDiff).to(at::kDouble).mean().item<double>();
  MESSAGE(what << ": share of elements beyond " << kFarDiff << ": " << far);
  CHECK(far < kFarShare);
}

}  // namespace

TEST_CASE("every strategy in bf16 trains like ddp in bf16, with an fp32 master and the ZeRO mixed-precision memory") {
  const int W = world_size();
  const std::string dir = shardtrain_test::make_shared_temp_dir("mixed_precision");
  MpiCommunicator comm(MPI_COMM_WORLD);
  AdamWOptions adamw;

  auto reference_model = make_model(5);
  DdpOptions ddp_options;
  ddp_options.bucket_cap_mb = 0.004;
  ddp_options.precision = bf16();
  DataParallel reference(*reference_model, comm, adamw, ddp_options);
  reference.broadcast_parameters(0);
  CHECK((reference_model->parameter("classifier.weight").scalar_type() == at::kBFloat16));
  CHECK((reference.flat_grads().scalar_type() == at::kBFloat16));
  std::vector<double> reference_norms;
  for (int s = 0; s < 3; ++s) reference_norms.push_back(step_on(reference, *reference_model, s));
  const at::Tensor reference_master = master_of(reference, dir + "/ddp.h5");
  // The bf16 parameters are the master's rounding.
  const int64_t numel = reference.layout().numel();
  CHECK(at::equal(reference.flat_params().narrow(0, 0, numel), reference_master.to(at::kBFloat16)));
  const int64_t psi = reference.layout().padded_numel(W);
  const StrategyMemory ddp_memory = reference.memory();
  CHECK(ddp_memory.param_bytes == 2 * psi);
  CHECK(ddp_memory.grad_bytes == 2 * psi);
  CHECK(ddp_memory.optimizer_bytes == 12 * psi);  // master 4 + exp_avg 4 + exp_avg_sq 4

  struct Variant {
    std::string name;
    ParallelConfig parallel;
    bool force_offload_copies = false;
  };
  std::vector<Variant> variants;
  auto add = [&](const std::string& name, StrategyKind kind) -> ParallelConfig& {
    Variant v;
    v.name = name;
    v.parallel.strategy = kind;
    v.parallel.bucket_cap_mb = 0.004;
    v.parallel.zero.stage3_prefetch_bucket_size = 0;
    v.parallel.zero.stage3_param_persistence_threshold = 0;
    variants.push_back(v);
    return variants.back().parallel;
  };
  add("zero1", StrategyKind::kZero1);
  add("zero2", StrategyKind::kZero2);
  add("zero3", StrategyKind::kZero3);
  add("fsdp", StrategyKind::kFsdp).fsdp.forward_prefetch = true;
  add("hybrid", StrategyKind::kHybrid).ranks_per_node = W / 2;
  add("zero3 offload (host copies)", StrategyKind::kZero3).offload_optimizer = OffloadDevice::kCpu;
  variants.back().force_offload_copies = true;

  for (const Variant& v : variants) {
    CAPTURE(v.name);
    auto model = make_model(5);
    std::unique_ptr<Strategy> strategy;
    const Topology topology = Topology::assume(world_rank(), W, W, v.parallel);
    if (v.force_offload_copies) {
      ShardOptions options = shard_options_for(v.parallel, topology);
      options.precision = bf16();
      options.force_offload_copies = true;
      strategy = std::make_unique<ShardedStrategy>(*model, comm, adamw, options);
    } else {
      strategy = make_strategy(v.parallel, topology, *model, comm, adamw, bf16());
    }
    strategy->broadcast_parameters(0);
    for (int s = 0; s < 3; ++s) {
      const double norm = step_on(*strategy, *model, s);
      CHECK(std::abs(norm - reference_norms[s]) <= 0.02 * reference_norms[s]);  // bf16 gradients: ~2^-8 each
    }
    CHECK(strategy->optimizer_step() == 3);
    const at::Tensor master = master_of(*strategy, dir + "/" + std::to_string(&v - variants.data()) + ".h5");
    check_close(master, reference_master, reference.layout(), v.name);
    // The parameters the model computes with are the master's rounding.
    const at::Tensor params = strategy->flat_params().narrow(0, 0, numel);
    CHECK((params.scalar_type() == at::kBFloat16));
    CHECK(at::equal(params, master.to(at::kBFloat16)));

    // Memory between steps: 16-bit parameters and gradients, 12 bytes of
    // optimizer state (master, exp_avg, exp_avg_sq) per element of the shard.
    const StrategyMemory m = strategy->memory();
    if (auto* sharded = dynamic_cast<ShardedStrategy*>(strategy.get())) {
      const int64_t S = sharded->shard_numel();
      const bool stage3 = v.name != "zero2";
      const int64_t G = v.name == "hybrid" && W / 2 < W && W / 2 > 0 ? W / 2 : W;
      CHECK(m.grad_bytes == 2 * S + (v.force_offload_copies ? 4 * S : 0));  // + the host's fp32 copy
      if (stage3) CHECK(m.param_bytes == 2 * S);
      else CHECK(m.param_bytes == 2 * S * G);  // the gathered 16-bit units
      CHECK(m.optimizer_bytes == 12 * S);
    } else {
      CHECK(m.param_bytes == 2 * psi);
      CHECK(m.grad_bytes == 2 * psi);
      CHECK(m.optimizer_bytes == 12 * (psi / W));
    }
  }
  shardtrain_test::remove_shared_dir(dir);
}

namespace {

struct ProgressRow {
  int64_t step = 0;
  double loss = 0, lr = 0, loss_scale = 0;
  int64_t skipped = 0;
};

// Rank 0's progress.csv rows (empty elsewhere).
std::vector<ProgressRow> progress_rows(const std::string& run_dir) {
  std::vector<ProgressRow> rows;
  if (world_rank() != 0) return rows;
  std::ifstream in(run_dir + "/progress.csv");
  std::string line;
  std::getline(in, line);
  REQUIRE(line == "step,epoch,loss,lr,grad_norm,samples_per_s,tokens_per_s,elapsed_s,loss_scale,skipped_steps");
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream fields(line);
    for (std::string x; std::getline(fields, x, ',');) f.push_back(x);
    REQUIRE(f.size() == 10);
    rows.push_back({std::stoll(f[0]), std::stod(f[2]), std::stod(f[3]), std::stod(f[8]), std::stoll(f[9])});
  }
  return rows;
}

// The loss scaler of the runs below: DeepSpeed's dynamic rules with a short
// window, so a few steps show every rule.
RunConfig loss_scaled_config(const std::string& dir) {
  RunConfig c = shardtrain_test::tiny_run_config(dir);
  c.model.hidden_dropout_prob = 0.0;
  c.model.attention_probs_dropout_prob = 0.0;
  c.train.log_every_steps = 1;
  c.train.fp16.loss_scale = 0;
  c.train.fp16.initial_scale_power = 10;
  c.train.fp16.loss_scale_window = 3;
  c.train.fp16.hysteresis = 2;
  c.train.fp16.min_loss_scale = 1;
  c.checkpoint.every_steps = 4;
  c.checkpoint.every_epochs = 0;
  return c;
}

TrainOptions overflowing() {
  TrainOptions o = shardtrain_test::quiet_train_options();
  o.force_loss_scaling = true;
  o.overflow_steps = {2, 3, 9};
  o.overflow_rank = world_size() - 1;  // one rank's gradients only
  return o;
}

}  // namespace

TEST_CASE("loss scaling: an overflow on one rank skips the step everywhere, backs off with hysteresis, keeps the lr") {
  const std::string dir = shardtrain_test::make_shared_temp_dir("loss_scale");
  RunConfig config = loss_scaled_config(dir);
  config.run.name = "straight";
  const TrainResult straight = train(config, MPI_COMM_WORLD, overflowing());
  REQUIRE(straight.finished);
  REQUIRE(straight.steps >= 10);
  CHECK(straight.skipped_steps == 3);
  const std::vector<ProgressRow> rows = progress_rows(dir + "/straight");
  if (world_rank() == 0) {
    REQUIRE(rows.size() == static_cast<size_t>(straight.steps));
    // DeepSpeed's rules, worked out by hand: 2^10 with hysteresis 2 and a
    // window of 3 good steps. Step 2 overflows (hysteresis 2 -> 1, scale
    // kept), step 3 overflows (scale halves), steps 4-6 are 3 good steps (scale
    // doubles, hysteresis refilled), step 9 overflows (hysteresis 2 -> 1), 10-12
    // good (doubles again).
    const double expected_scale[] = {1024, 1024, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 2048};
    const int64_t expected_skipped[] = {0, 1, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3};
    for (size_t i = 0; i < std::min<size_t>(rows.size(), 12); ++i) {
      CAPTURE(i + 1);
      CHECK(rows[i].step == static_cast<int64_t>(i + 1));
      CHECK(rows[i].loss_scale == expected_scale[i]);
      CHECK(rows[i].skipped == expected_skipped[i]);
    }
    // The schedule follows applied updates: steps 2, 3 and 4 all run with the
    // lr of update 1 (2 and 3 were skipped), step 5 with update 2's.
    CHECK(rows[1].lr == rows[2].lr);
    CHECK(rows[2].lr == rows[3].lr);
    CHECK(rows[4].lr != rows[3].lr);
    CHECK(rows[0].lr != rows[1].lr);
  }
  // The checkpoint records the skips and the scaler.
  {
    CheckpointReader reader(checkpoint_path(dir + "/straight", 2), MPI_COMM_WORLD);  // step 8
    const TrainState state = read_train_state(reader);
    CHECK(state.step == 8);
    CHECK(state.skipped_steps == 2);
    CHECK(state.loss_scale == 1024);
    CHECK(state.loss_scale_good_steps == 2);
    CHECK(state.loss_scale_hysteresis_left == 2);
  }

  // Stopped after step 6 (checkpoint at 4) and resumed: the same run, bit for bit.
  config.run.name = "resumed";
  TrainOptions stop = overflowing();
  stop.stop_after_step = 6;
  CHECK_FALSE(train(config, MPI_COMM_WORLD, stop).finished);
  const TrainResult resumed = train(config, MPI_COMM_WORLD, overflowing());
  CHECK(resumed.resumed_from == checkpoint_path(dir + "/resumed", 1));
  CHECK(resumed.skipped_steps == 3);
  CHECK(at::equal(resumed.final_params, straight.final_params));
  const std::vector<ProgressRow> resumed_rows = progress_rows(dir + "/resumed");
  if (world_rank() == 0) {
    REQUIRE(resumed_rows.size() == rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      CAPTURE(i + 1);
      CHECK(resumed_rows[i].loss_scale == rows[i].loss_scale);
      CHECK(resumed_rows[i].skipped == rows[i].skipped);
      CHECK(resumed_rows[i].lr == rows[i].lr);
      CHECK(resumed_rows[i].loss == rows[i].loss);
    }
  }
  shardtrain_test::remove_shared_dir(dir);
}

TEST_CASE("bf16 training follows fp32 training on the quickstart model for 50 steps") {
  // The same 16 rows a step at any rank count, so the curves do not depend on
  // it: run at -np 2 only. bf16 matmuls on a CPU without bf16 instructions are
  // emulated (about 28 s here), and the -np 4 run would only repeat them; the
  // bf16 collectives at -np 4 are the first test case's.
  if (world_size() != 2) {
    MESSAGE("runs at -np 2 only (its result does not depend on the rank count)");
    return;
  }
  const std::string dir = shardtrain_test::make_shared_temp_dir("bf16_quickstart");
  RunConfig config = shardtrain_test::tiny_run_config(dir);
  config.model.config = std::string(SHARDTRAIN_SOURCE_DIR) + "/configs/models/bert_tiny.json";
  config.data.train_file = shardtrain_test::head_of_shipped("data/glue/MRPC/train.tsv", 400, dir, "train400.tsv");
  config.data.eval_file.clear();
  config.train.lr = 3e-4;
  config.train.log_every_steps = 1;
  config.train.batch_size = 16 / world_size();  // 16 per step at any rank count: 25 steps an epoch
  config.train.max_steps = 50;
  config.checkpoint.every_epochs = 0;
  config.run.name = "fp32";
  const TrainResult fp32 = train(config, MPI_COMM_WORLD, shardtrain_test::quiet_train_options());
  config.run.name = "bf16";
  config.train.mixed_precision = Precision::kBf16;
  const TrainResult bf16_run = train(config, MPI_COMM_WORLD, shardtrain_test::quiet_train_options());
  REQUIRE(fp32.finished);
  REQUIRE(bf16_run.finished);
  CHECK((bf16_run.final_params.scalar_type() == at::kBFloat16));
  const std::vector<ProgressRow> a = progress_rows(dir + "/fp32"), b = progress_rows(dir + "/bf16");
  if (world_rank() == 0) {
    REQUIRE(a.size() == 50);
    REQUIRE(b.size() == 50);
    // bf16 keeps 8 significant bits: each matmul and sum rounds at 2^-8
    // relative, and the errors of a forward partly average out in the loss
    // (~0.6-0.7 here); the masters are fp32 and the updates equal up to that
    // noise, so the curves stay together instead of drifting apart. Bound:
    // 0.01 at every step (2.5 bf16 ulps of the loss), 0.003 on the mean over
    // the 50 (measured: 1.1e-3 and 2.3e-4 at -np 2).
    double worst = 0, mean = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      worst = std::max(worst, std::abs(a[i].loss - b[i].loss));
      mean += std::abs(a[i].loss - b[i].loss) / static_cast<double>(a.size());
    }
    MESSAGE("bf16 vs fp32 train loss over 50 steps: max |diff| " << worst << ", mean " << mean);
    CHECK(worst <= 0.01);
    CHECK(mean <= 0.003);
  }
  shardtrain_test::remove_shared_dir(dir);
}

TEST_CASE("checkpoints hold fp32 masters: bf16 resumes in fp32 and fp32 in bf16, at another strategy and rank count") {
  const int W = world_size();
  const std::string dir = shardtrain_test::make_shared_temp_dir("mp_checkpoints");
  MpiCommunicator comm(MPI_COMM_WORLD);
  AdamWOptions adamw;
  // bf16 zero3 on W ranks, 2 steps, checkpoint.
  auto model = make_model(5);
  ParallelConfig zero3;
  zero3.strategy = StrategyKind::kZero3;
  zero3.zero.stage3_param_persistence_threshold = 0;
  std::unique_ptr<Strategy> writer = make_strategy(zero3, Topology::assume(world_rank(), W, W, zero3), *model, comm,
                                                   adamw, bf16());
  writer->broadcast_parameters(0);
  for (int s = 0; s < 2; ++s) step_on(*writer, *model, s);
  const at::Tensor master = master_of(*writer, dir + "/bf16_zero3.h5");

  // Read by fp32 ddp on the first W/2 ranks: its parameters are the master exactly.
  MPI_Comm half = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() < W / 2 ? 0 : MPI_UNDEFINED, world_rank(), &half);
  if (half != MPI_COMM_NULL) {
    // Everything on `half` (its readers too: closing one is collective) ends before MPI_Comm_free.
    [&] {
      MpiCommunicator half_comm(half);
      auto fresh = make_model(9);
      DataParallel ddp(*fresh, half_comm, adamw);
      CheckpointReader reader(dir + "/bf16_zero3.h5", half);
      std::vector<FlatPart> parts = ddp.checkpoint_parts();
      read_train_parts(reader, flat_tensors(ddp.layout()), parts, true);
      ddp.finish_load(read_train_state(reader).step);
      CHECK(at::equal(ddp.flat_params().narrow(0, 0, master.numel()), master));
      CHECK(ddp.optimizer_step() == 2);
      // fp32 ddp's checkpoint, read by bf16 zero2 on those ranks: master exact, parameters its rounding.
      step_on_comm(ddp, *fresh, half_comm);
      TrainState state;
      state.step = ddp.optimizer_step();
      write_train_checkpoint(dir + "/fp32_ddp.h5", flat_tensors(ddp.layout()), ddp.checkpoint_parts(), state, half);
      auto other = make_model(11);
      ParallelConfig zero2;
      zero2.strategy = StrategyKind::kZero2;
      const Topology half_topology = Topology::assume(world_rank(), W / 2, W / 2, zero2);
      std::unique_ptr<Strategy> reader2 = make_strategy(zero2, half_topology, *other, half_comm, adamw, bf16());
      CheckpointReader file(dir + "/fp32_ddp.h5", half);
      std::vector<FlatPart> parts2 = reader2->checkpoint_parts();
      read_train_parts(file, flat_tensors(reader2->layout()), parts2, true);
      reader2->finish_load(read_train_state(file).step);
      const at::Tensor expected = ddp.flat_params().narrow(0, 0, master.numel());
      CHECK(at::equal(reader2->flat_params().narrow(0, 0, master.numel()), expected.to(at::kBFloat16)));
      for (const FlatPart& part : reader2->checkpoint_parts())
        CHECK(at::equal(part.params.cpu(), expected.narrow(0, part.begin, part.params.numel())));
    }();
    MPI_Comm_free(&half);
  }
  shardtrain_test::remove_shared_dir(dir);
}

}  // namespace mixed_precision_mpi_test
