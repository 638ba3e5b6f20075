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
#include <memory>
#include <string>
#include <vector>

#include "shardtrain/checkpoint/checkpoint.h"
#include "shardtrain/comm/mpi_communicator.h"
#include "shardtrain/model/bert.h"
#include "shardtrain/parallel/ddp.h"
#include "shardtrain/parallel/make_strategy.h"
#include "shardtrain/parallel/sharded.h"
#include "shardtrain/train/train_checkpoint.h"
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

std::shared_ptr<BertForSequenceClassification> make_model(uint64_t seed) {
  auto model = std::make_shared<BertForSequenceClassification>(shardtrain_test::tiny_bert_config());
  model->init_weights(seed);
  return model;
}

// Data-rank r's micro-batch m of step s: the same for every strategy.
shardtrain_test::TinyInputs inputs_for(int r, int s, int m) {
  at::manual_seed(7000 + 101 * r + 7 * s + m);
  return {torch::randint(1, 50, {3, 7}, torch::kInt64), torch::randint(0, 2, {3, 7}, torch::kInt64),
          torch::randint(0, 3, {3}, torch::kInt64)};
}

double step_on(Strategy& strategy, BertForSequenceClassification& model, int s) {
  return shardtrain_test::step_over(strategy, model, {inputs_for(world_rank(), s, 0), inputs_for(world_rank(), s, 1)},
                                    kLr, kMaxGradNorm);
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
  CHECK((reference_model->classifier()->weight.scalar_type() == at::kBFloat16));
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

}  // namespace mixed_precision_mpi_test
