// The memory estimate's model states against what the strategies really
// allocate (train/memory_estimate.h): Strategy::memory() after a training step
// (bench_sharding's measure), max over ranks, for every strategy, fp32 and
// bf16, BERT, ModernBERT, DistilBERT and ELECTRA, at the job's rank count
// (run at -np 1, 2 and 4). The issue asks for 2 %; the estimate follows the
// strategies' buffer rules, so it should be exact, and 2 % is the bound
// tested. The gathered-unit estimate is compared with the measured peak of
// gathered parameters + unsharded gradients loosely (0.5x to 3x: that peak
// depends on when collectives complete).
#include <torch/torch.h>

#include <doctest/doctest.h>
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "support/mpi_ranks.h"
#include "support/train_fixtures.h"
#include "shardtrain/comm/mpi_communicator.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/parallel/frozen_shards.h"
#include "shardtrain/parallel/make_strategy.h"
#include "shardtrain/parallel/topology.h"
#include "shardtrain/train/memory_estimate.h"

using namespace shardtrain;

namespace memory_estimate_mpi_test {
namespace {

constexpr double kStatesTolerance = 0.02;  // the bound

int64_t max_over_world(int64_t value) {
  MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  return value;
}

EncoderConfig memory_estimate_family(const std::string& name) {
  if (name == "bert") return shardtrain_test::tiny_bert_config();
  EncoderConfig c =
      EncoderConfig::from_file(std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/fixtures/family_golden/" + name + "/config.json");
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0;
  return c;
}

struct Case {
  std::string label;
  RunConfig run;
};

std::vector<Case> memory_estimate_cases(int world) {
  std::vector<Case> cases;
  for (const Precision precision : {Precision::kNo, Precision::kBf16}) {
    auto add = [&](const std::string& label, auto&& edit) {
      Case c;
      c.label = label + (precision == Precision::kBf16 ? " bf16" : "");
      c.run.train.mixed_precision = precision;
      // Some tensors (biases, norms) below the threshold, the weights above it.
      c.run.parallel.zero.stage3_param_persistence_threshold = 200;
      edit(c.run.parallel);
      cases.push_back(c);
    };
    add("ddp", [](ParallelConfig& p) { p.strategy = StrategyKind::kDdp; });
    add("zero1", [](ParallelConfig& p) { p.strategy = StrategyKind::kZero1; });
    add("zero2", [](ParallelConfig& p) { p.strategy = StrategyKind::kZero2; });
    add("zero3", [](ParallelConfig& p) { p.strategy = StrategyKind::kZero3; });
    add("zero3 no prefetch", [](ParallelConfig& p) {
      p.strategy = StrategyKind::kZero3;
      p.zero.stage3_prefetch_bucket_size = 0;
    });
    add("fsdp", [](ParallelConfig& p) { p.strategy = StrategyKind::kFsdp; });
    add("fsdp SHARD_GRAD_OP", [](ParallelConfig& p) {
      p.strategy = StrategyKind::kFsdp;
      p.fsdp.sharding_strategy = FsdpShardingStrategy::kShardGradOp;
    });
    add("zero1 offload (nothing to move on a CPU)", [](ParallelConfig& p) {
      p.strategy = StrategyKind::kZero1;
      p.offload_optimizer = OffloadDevice::kCpu;
    });
    if (world >= 2)
      add("hybrid", [world](ParallelConfig& p) {
        p.strategy = StrategyKind::kHybrid;
        p.ranks_per_node = world / 2;
      });
  }
  return cases;
}

}  // namespace

TEST_CASE("estimated model states equal what each strategy allocates, every family, fp32 and bf16") {
  const int world = shardtrain_test::world_size(), rank = shardtrain_test::world_rank();
  MpiCommunicator comm(MPI_COMM_WORLD);
  for (const std::string family :
       {"bert", "modernbert_cls_l4", "distilbert_sinusoidal_l1", "distilbert_l2", "electra_project_l2", "deberta_v3_l2"}) {
    EncoderConfig config = memory_estimate_family(family);
    for (const Case& c : memory_estimate_cases(world)) {
      // DistilBERT's fixed sinusoidal positions stay fp32 and a bf16 forward
      // refuses them ("expected scalar type Float but found BFloat16"): a
      // model defect reported to the model's owner, not the estimate's.
      if (family == std::string("distilbert_sinusoidal_l1") && c.run.train.mixed_precision != Precision::kNo) continue;
      CAPTURE(family);
      CAPTURE(c.label);
      CAPTURE(world);
      auto model = std::make_shared<TaskModel>(config);
      model->init_weights(7);
      model->train();
      const Topology topology = Topology::detect(MPI_COMM_WORLD, c.run.parallel);
      std::unique_ptr<Strategy> strategy =
          make_strategy(c.run.parallel, topology, *model, comm, AdamWOptions{},
                        mixed_precision_for(c.run.train.mixed_precision, c.run.parallel));
      strategy->broadcast_parameters(0);
      at::manual_seed(100 + rank);
      const int64_t rows = 2, length = std::min<int64_t>(7, config.max_sequence_length());
      shardtrain_test::TinyInputs in{torch::randint(1, 30, {rows, length}, torch::kInt64),
                                     torch::zeros({rows, length}, torch::kInt64),
                                     torch::randint(0, config.num_labels, {rows}, torch::kInt64)};
      shardtrain_test::step_over(*strategy, *model, {in}, 1e-3, 1.0);
      const StrategyMemory m = strategy->memory();
      const double measured = static_cast<double>(max_over_world(m.total()));
      const double measured_transient = static_cast<double>(max_over_world(m.peak_transient_bytes));

      const MemoryEstimate e = estimate_memory(c.run, config, world);
      const double estimated = e.model_states_bytes() + e.host_bytes;
      CHECK(e.num_parameters == config.num_parameters());
      CHECK(estimated == doctest::Approx(measured).epsilon(kStatesTolerance));
      CHECK(e.param_bytes == doctest::Approx(static_cast<double>(max_over_world(m.param_bytes))).epsilon(kStatesTolerance));
      CHECK(e.grad_bytes == doctest::Approx(static_cast<double>(max_over_world(m.grad_bytes))).epsilon(kStatesTolerance));
      if (measured_transient > 0) {
        // How many units are gathered or hold gradients at once depends on
        // when the collectives complete (MPI progresses them inside calls),
        // so the gathered figure is a guide (zero2 assumes every unit's
        // gradients alive at once): from half to three times the measured.
        CHECK(e.gathered_bytes >= 0.5 * measured_transient);
        CHECK(e.gathered_bytes <= 3 * measured_transient);
      }
    }
  }
}

// LoRA (issue 44): the strategy holds the trained parameters only (the
// adapters and the head), and the frozen base is held as build_strategy
// (src/train/job.cpp) holds it: cast to the parameters' dtype, whole on every
// rank, or under zero3 / hybrid in FrozenShards' per-unit chunks. The
// estimate's states equal the strategy's to the same 2 %, and its frozen
// base FrozenShards' (or the frozen tensors') bytes exactly.
TEST_CASE("LoRA: estimated states and frozen base equal what the strategies and FrozenShards hold, fp32 and bf16") {
  const int world = shardtrain_test::world_size(), rank = shardtrain_test::world_rank();
  MpiCommunicator comm(MPI_COMM_WORLD);
  for (const std::string family : {"bert", "modernbert_cls_l4"}) {
    EncoderConfig config = memory_estimate_family(family);
    for (Case c : memory_estimate_cases(world)) {
      CAPTURE(family);
      CAPTURE(c.label);
      CAPTURE(world);
      c.run.lora.r = 4;
      if (family != "bert") c.run.lora.target_modules = {"Wqkv", "Wo"};
      const MixedPrecision precision = mixed_precision_for(c.run.train.mixed_precision, c.run.parallel);
      auto model = std::make_shared<TaskModel>(config);
      model->init_weights(7);
      model->add_lora(resolve_lora(config, c.run.lora), 7);
      model->frozen_to(precision.param_dtype);
      model->train();
      const Topology topology = Topology::detect(MPI_COMM_WORLD, c.run.parallel);
      std::unique_ptr<Strategy> strategy =
          make_strategy(c.run.parallel, topology, *model, comm, AdamWOptions{}, precision);
      std::unique_ptr<FrozenShards> frozen;
      if (topology.shards_frozen_base())
        frozen = std::make_unique<FrozenShards>(*model, comm.split(topology.replica_index, topology.shard_rank));
      strategy->broadcast_parameters(0);
      at::manual_seed(100 + rank);
      const int64_t rows = 2, length = std::min<int64_t>(7, config.max_sequence_length());
      shardtrain_test::TinyInputs in{torch::randint(1, 30, {rows, length}, torch::kInt64),
                                     torch::zeros({rows, length}, torch::kInt64),
                                     torch::randint(0, config.num_labels, {rows}, torch::kInt64)};
      shardtrain_test::step_over(*strategy, *model, {in}, 1e-3, 1.0);
      const StrategyMemory m = strategy->memory();
      int64_t trained = 0, frozen_bytes = 0;
      for (const auto& [name, tensor] : model->state_dict()) trained += tensor.numel();
      for (const auto& [name, tensor] : model->frozen_state_dict()) frozen_bytes += tensor.numel() * tensor.element_size();
      if (frozen) frozen_bytes = frozen->shard_bytes();

      const MemoryEstimate e = estimate_memory(c.run, config, world);
      CHECK(e.lora());
      CHECK(e.num_parameters == trained);
      CHECK(e.frozen_sharded == (frozen != nullptr));
      CHECK(e.frozen_bytes == static_cast<double>(max_over_world(frozen_bytes)));
      CHECK(e.model_states_bytes() + e.host_bytes ==
            doctest::Approx(static_cast<double>(max_over_world(m.total()))).epsilon(kStatesTolerance));
      CHECK(e.param_bytes == doctest::Approx(static_cast<double>(max_over_world(m.param_bytes))).epsilon(kStatesTolerance));
      CHECK(e.grad_bytes == doctest::Approx(static_cast<double>(max_over_world(m.grad_bytes))).epsilon(kStatesTolerance));
    }
  }
}

}  // namespace memory_estimate_mpi_test
