// The packed forward (forward_packed, model/bert.h) under every strategy's
// hooks: the same model trained on the same global batches, padded or packed,
// ends with the same parameters after a few steps for ddp, zero1, zero2, zero3
// and fsdp. This runs the strategies' unit hooks (gather / free around each
// unit, gradient hooks on the units' [T, D] outputs) and the word-embedding
// gradient's in-place sparse accumulation into their flat gradient buffers.
// The second case: gradient checkpointing (model.gradient_checkpointing) with
// dropout on trains bit-identically to the plain run, padded and packed,
// under the same strategies (ZeRO-3 and FSDP gather a layer again for its
// recomputation). Every step goes through train_step, as the trainer's does.
// Runs at -np 2 and -np 4.
//
// Tolerance: padded and packed gradients differ by fp32 rounding (~1e-8 here,
// test_bert_packed.cpp); AdamW at lr 1e-2 turns that into parameter
// differences of a few ulp of lr per step. 1e-6 after 3 steps, as
// test_sharding_mpi.cpp allows between strategies; a lost gradient, a unit not
// gathered or a token attending across sequences moves parameters by ~1e-2.
#include <torch/torch.h>

#include <doctest/doctest.h>
#include <mpi.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "support/mpi_ranks.h"
#include "support/train_fixtures.h"
#include "shardtrain/comm/mpi_communicator.h"
#include "shardtrain/data/collator.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/parallel/make_strategy.h"
#include "shardtrain/train/train_step.h"

using namespace shardtrain;

namespace bert_packed_mpi_test {
using shardtrain_test::world_rank;
using shardtrain_test::world_size;

namespace {

constexpr double kParamTolerance = 1e-6;  // see the file comment
constexpr int kRowsPerRank = 3;

// This rank's rows of global batch s: random lengths 1..7, right-padded with 0.
Batch rank_batch(int s, int rank) {
  const int64_t rows = kRowsPerRank * world_size();
  auto gen = at::detail::createCPUGenerator(4100 + s);
  const at::Tensor lengths = at::randint(1, 8, {rows}, gen, at::kLong);
  const at::Tensor ids = at::randint(1, 50, {rows, 7}, gen, at::kLong);
  const at::Tensor types = at::randint(0, 2, {rows, 7}, gen, at::kLong);
  const at::Tensor labels = at::randint(0, 3, {rows}, gen, at::kLong);
  Batch b;
  const at::Tensor mine = at::arange(rank * kRowsPerRank, (rank + 1) * kRowsPerRank, at::kLong);
  const at::Tensor my_lengths = lengths.index_select(0, mine);
  const int64_t L = my_lengths.max().item<int64_t>();
  b.attention_mask = (at::arange(L, at::kLong).unsqueeze(0) < my_lengths.unsqueeze(1)).to(at::kLong);
  b.input_ids = ids.index_select(0, mine).narrow(1, 0, L).masked_fill(b.attention_mask == 0, 0);
  b.token_type_ids = types.index_select(0, mine).narrow(1, 0, L).masked_fill(b.attention_mask == 0, 0);
  b.labels = labels.index_select(0, mine);
  return b;
}

// One optimizer step through shardtrain::train_step (the trainer's step), the
// model computing padded or packed as set_unpadded() says.
double step_on(Strategy& strategy, TaskModel& model, int s, bool with_dropout) {
  StepOptions options;
  options.lr = 1e-2;
  options.max_grad_norm = 1.0;
  if (with_dropout) options.dropout_seed = DropoutSeed{7, s, world_rank()};
  return train_step(strategy, model, {rank_batch(s, world_rank())}, options).grad_norm;
}

struct Variant {
  const char* name;
  bool unpadded;
  bool checkpointing;
};

// Trains `variants` side by side (the same init, the same batches) under
// strategy `name` for 3 steps; after each step each variant's parameters
// must be within `tolerance` of variant 0's.
void train_variants(const std::string& name, const std::vector<Variant>& variants, const EncoderConfig& config,
                    bool with_dropout, double tolerance) {
  MpiCommunicator comm(MPI_COMM_WORLD);
  AdamWOptions adamw;
  ParallelConfig parallel;
  // "zero3+offload": the strategy with parallel.offload_optimizer = "cpu".
  const size_t plus = name.find('+');
  parallel.strategy = parse_enum<StrategyKind>(name.substr(0, plus), "parallel.strategy");
  if (plus != std::string::npos) parallel.offload_optimizer = OffloadDevice::kCpu;
  // hybrid: nodes of half the ranks (sharded within, replicated across).
  if (parallel.strategy == StrategyKind::kHybrid) parallel.ranks_per_node = std::max(1, world_size() / 2);
  parallel.zero.stage3_param_persistence_threshold = 0;  // every tensor sharded, gathered and freed
  std::vector<std::shared_ptr<TaskModel>> models;
  std::vector<std::unique_ptr<Strategy>> strategies;
  for (const Variant& v : variants) {
    models.push_back(std::make_shared<TaskModel>(config));
    models.back()->init_weights(31);
    models.back()->set_unpadded(v.unpadded);
    models.back()->set_gradient_checkpointing(v.checkpointing);
    strategies.push_back(make_strategy(parallel, *models.back(), comm, adamw));
    strategies.back()->broadcast_parameters(0);
  }
  for (int s = 0; s < 3; ++s) {
    CAPTURE(s);
    std::vector<double> norms;
    for (size_t i = 0; i < variants.size(); ++i) norms.push_back(step_on(*strategies[i], *models[i], s, with_dropout));
    const at::Tensor reference = strategies[0]->flat_params();
    for (size_t i = 1; i < variants.size(); ++i) {
      CAPTURE(variants[i].name);
      CHECK(std::abs(norms[i] - norms[0]) <= 1e-5 * norms[0]);
      const double diff = (strategies[i]->flat_params() - reference).abs().max().item<double>();
      MESSAGE(name << " at " << world_size() << " ranks, step " << s << ": max |" << variants[i].name << " - "
                   << variants[0].name << "| " << diff);
      CHECK(diff <= tolerance);
    }
  }
}

}  // namespace

TEST_CASE("packed and padded batches train identically under ddp, zero1, zero2, zero3 and fsdp") {
  for (const std::string name : {"ddp", "zero1", "zero2", "zero3", "fsdp"}) {
    CAPTURE(name);
    train_variants(name, {{"padded", false, false}, {"packed", true, false}}, shardtrain_test::tiny_bert_config(),
                   false, kParamTolerance);
  }
}

// Activation checkpointing recomputes each layer with the forward's RNG
// states, so with dropout on the gradients are the plain run's bit for bit
// (0 tolerance), padded and packed, under every strategy's unit hooks (ZeRO-3,
// FSDP and hybrid gather the layer again for the recomputation), with and
// without optimizer offload.
TEST_CASE("gradient checkpointing trains bit-identically to the plain run under every strategy, with dropout") {
  EncoderConfig config = shardtrain_test::tiny_bert_config();
  config.hidden_dropout_prob = 0.1;
  config.attention_probs_dropout_prob = 0.1;
  for (const std::string name : {"ddp", "zero1", "zero2", "zero3", "fsdp", "hybrid", "zero3+offload", "zero1+offload"}) {
    CAPTURE(name);
    train_variants(name, {{"padded", false, false}, {"padded+checkpointing", false, true}}, config, true, 0.0);
    train_variants(name, {{"packed", true, false}, {"packed+checkpointing", true, true}}, config, true, 0.0);
  }
}

}  // namespace bert_packed_mpi_test
