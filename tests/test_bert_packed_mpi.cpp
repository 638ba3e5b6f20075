// The packed forward (forward_packed, model/bert.h) under every strategy's
// hooks: the same model trained on the same global batches, padded or packed,
// ends with the same parameters after a few steps for ddp, zero1, zero2, zero3
// and fsdp. This runs the strategies' unit hooks (gather / free around each
// unit, gradient hooks on the units' [T, D] outputs) and the word-embedding
// gradient's in-place sparse accumulation into their flat gradient buffers.
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

#include <memory>
#include <string>
#include <vector>

#include "support/mpi_ranks.h"
#include "support/train_fixtures.h"
#include "shardtrain/comm/mpi_communicator.h"
#include "shardtrain/data/collator.h"
#include "shardtrain/model/bert.h"
#include "shardtrain/parallel/make_strategy.h"

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

double train_step(Strategy& strategy, BertForSequenceClassification& model, int s, bool packed) {
  const Batch padded = rank_batch(s, world_rank());
  strategy.zero_grad();
  strategy.prepare_backward(true);
  at::Tensor logits;
  if (packed) {
    const PackedBatch p = pack_batch(padded);
    logits = model.forward_packed(p.input_ids, p.token_type_ids, p.position_ids, p.cu_seqlens, p.max_seqlen);
  } else {
    logits = model.forward(padded.input_ids, padded.token_type_ids, padded.attention_mask);
  }
  model.loss(logits, padded.labels).backward();
  strategy.finish_backward();
  return strategy.step(1e-2, 1.0);
}

}  // namespace

TEST_CASE("packed and padded batches train identically under ddp, zero1, zero2, zero3 and fsdp") {
  MpiCommunicator comm(MPI_COMM_WORLD);
  AdamWOptions adamw;
  for (const std::string name : {"ddp", "zero1", "zero2", "zero3", "fsdp"}) {
    CAPTURE(name);
    ParallelConfig parallel;
    parallel.strategy = name;
    parallel.zero.stage3_param_persistence_threshold = 0;  // every tensor sharded, gathered and freed
    std::shared_ptr<BertForSequenceClassification> models[2];
    std::unique_ptr<Strategy> strategies[2];
    for (int packed = 0; packed < 2; ++packed) {
      models[packed] = std::make_shared<BertForSequenceClassification>(shardtrain_test::tiny_bert_config());
      models[packed]->init_weights(31);
      strategies[packed] = make_strategy(parallel, *models[packed], comm, adamw);
      strategies[packed]->broadcast_parameters(0);
    }
    for (int s = 0; s < 3; ++s) {
      CAPTURE(s);
      const double padded_norm = train_step(*strategies[0], *models[0], s, false);
      const double packed_norm = train_step(*strategies[1], *models[1], s, true);
      CHECK(std::abs(packed_norm - padded_norm) <= 1e-5 * padded_norm);
      const double diff =
          (strategies[1]->flat_params() - strategies[0]->flat_params()).abs().max().item<double>();
      MESSAGE(name << " at " << world_size() << " ranks, step " << s << ": max |packed - padded| " << diff);
      CHECK(diff <= kParamTolerance);
    }
  }
}

}  // namespace bert_packed_mpi_test
