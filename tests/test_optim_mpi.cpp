// optim over ZeRO-style shards (np 2 and 4): AdamW on each rank's shard of the
// padded flat buffer, all-gathered, is bit-identical to AdamW on the whole
// buffer in one process (every op is elementwise); the global-norm clip over
// shards equals the single-process clip; overflow on one rank is seen by all.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <mpi.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "shardtrain/comm/mpi_communicator.h"
#include "shardtrain/optim/adamw.h"
#include "shardtrain/optim/clip.h"
#include "shardtrain/optim/loss_scaler.h"
#include "shardtrain/optim/param_layout.h"
#include "shardtrain/optim/schedule.h"

using namespace shardtrain;

namespace {

// A small BERT-like parameter list with odd sizes, so shards cut through
// parameters and the last shard holds padding.
std::vector<std::pair<std::string, at::Tensor>> bert_like_parameters() {
  return {{"bert.embeddings.word_embeddings.weight", torch::zeros({101, 16})},
          {"bert.embeddings.LayerNorm.weight", torch::zeros({16})},
          {"bert.embeddings.LayerNorm.bias", torch::zeros({16})},
          {"bert.encoder.layer.0.attention.self.query.weight", torch::zeros({16, 16})},
          {"bert.encoder.layer.0.attention.self.query.bias", torch::zeros({16})},
          {"bert.encoder.layer.0.output.dense.weight", torch::zeros({16, 37})},
          {"bert.encoder.layer.0.output.dense.bias", torch::zeros({16})},
          {"classifier.weight", torch::zeros({2, 16})},
          {"classifier.bias", torch::zeros({2})}};
}

// Same values on every rank (seeded CPU generator), zero padding at the end.
at::Tensor padded_randn(int64_t numel, int64_t padded, uint64_t seed, double scale) {
  auto gen = at::detail::createCPUGenerator(seed);
  at::Tensor out = torch::zeros({padded});
  out.narrow(0, 0, numel).copy_(at::randn({numel}, gen, at::TensorOptions().dtype(at::kFloat)) * scale);
  return out;
}

}  // namespace

TEST_CASE("AdamW + clipping on shards, all-gathered, equals the whole buffer in one process") {
  MpiCommunicator comm(MPI_COMM_WORLD);
  const int rank = comm.rank(), size = comm.size();
  const ParamLayout layout(bert_like_parameters());
  const int64_t padded = layout.padded_numel(size);
  const ElementRange shard = layout.shard_range(rank, size);
  const std::vector<ElementRange> shard_decay = layout.decay_ranges_in(shard);
  CAPTURE(rank);
  CAPTURE(size);

  AdamWOptions options;
  options.lr = 1e-3;
  options.weight_decay = 0.01;
  const LinearWarmupDecay schedule(options.lr, 2, 6);
  const double max_norm = 1.0;

  at::Tensor whole_params = padded_randn(layout.numel(), padded, 11, 1.0);
  at::Tensor shard_params = whole_params.narrow(0, shard.begin, shard.size()).clone();
  AdamW whole(layout.numel(), options);
  AdamW sharded(shard.size(), options);

  for (int64_t step = 0; step < 6; ++step) {
    CAPTURE(step);
    // Alternate large and small gradients: both sides of the clip threshold.
    at::Tensor whole_grads = padded_randn(layout.numel(), padded, 100 + step, step % 2 ? 0.5 : 0.001);
    at::Tensor shard_grads = whole_grads.narrow(0, shard.begin, shard.size()).clone();

    const double whole_norm = clip_grad_norm(whole_grads.narrow(0, 0, layout.numel()), max_norm);
    const double shard_norm = clip_grad_norm(shard_grads, max_norm, comm);
    // Float64 sums in a different grouping: equal to float64 rounding, far inside 1e-6.
    CHECK(std::abs(shard_norm - whole_norm) <= 1e-6 * whole_norm);
    CHECK(torch::allclose(shard_grads, whole_grads.narrow(0, shard.begin, shard.size()), 1e-6, 0.0));
    // Feed both optimizers the same clipped gradients so the AdamW comparison is exact.
    shard_grads.copy_(whole_grads.narrow(0, shard.begin, shard.size()));

    whole.step(whole_params.narrow(0, 0, layout.numel()), whole_grads.narrow(0, 0, layout.numel()),
               layout.decay_ranges(), schedule.lr(step));
    sharded.step(shard_params, shard_grads, shard_decay, schedule.lr(step));
  }

  at::Tensor gathered = torch::empty({padded});
  comm.all_gather(shard_params, gathered);
  CHECK(torch::equal(gathered, whole_params));
  at::Tensor gathered_m = torch::empty({padded});
  comm.all_gather(sharded.exp_avg(), gathered_m);
  CHECK(torch::equal(gathered_m.narrow(0, 0, layout.numel()), whole.exp_avg()));
  at::Tensor gathered_v = torch::empty({padded});
  comm.all_gather(sharded.exp_avg_sq(), gathered_v);
  CHECK(torch::equal(gathered_v.narrow(0, 0, layout.numel()), whole.exp_avg_sq()));
  // Padding stays zero (zero grads, no decay).
  CHECK(gathered.narrow(0, layout.numel(), padded - layout.numel()).abs().sum().item<float>() == 0.0f);
}

TEST_CASE("an overflow on one rank is seen by every rank") {
  MpiCommunicator comm(MPI_COMM_WORLD);
  at::Tensor g = torch::ones({1000}) * static_cast<float>(comm.rank());
  CHECK_FALSE(found_inf_any_rank(g, comm));
  if (comm.rank() == comm.size() - 1) g[999] = std::numeric_limits<float>::infinity();
  CHECK(found_inf_any_rank(g, comm));
  DynamicLossScaler scaler;
  CHECK_FALSE(scaler.update(found_inf_any_rank(g, comm)));
  CHECK(scaler.scale() == 32768.0);
}
