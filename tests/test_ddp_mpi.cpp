// DataParallel: flat buffers, bucketed all-reduce launched from autograd hooks,
// no_sync accumulation. Checked against gradients computed without any
// communication. Runs at -np 2 and -np 4.
#include <torch/torch.h>

#include <doctest/doctest.h>
#include <mpi.h>

#include "support/mpi_ranks.h"
#include "support/train_fixtures.h"
#include "shardtrain/comm/mpi_communicator.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/parallel/ddp.h"
#include "shardtrain/train/train_checkpoint.h"

using namespace shardtrain;

// Everything in a file namespace: the *_mpi tests are compiled together (unity build).
namespace ddp_mpi_test {
using shardtrain_test::world_rank;
using shardtrain_test::world_size;

namespace {

EncoderConfig tiny() { return shardtrain_test::tiny_bert_config(); }

struct Inputs {
  at::Tensor ids, types, labels;
};

// Rank r's micro-batch m: deterministic, different for every (r, m).
Inputs inputs_for(int r, int m) {
  at::manual_seed(1000 + 17 * r + m);
  Inputs in;
  in.ids = torch::randint(1, 50, {3, 7}, torch::kInt64);
  in.types = torch::randint(0, 2, {3, 7}, torch::kInt64);
  in.labels = torch::randint(0, 3, {3}, torch::kInt64);
  return in;
}

at::Tensor loss_of(TaskModel& model, const Inputs& in) {
  return model.loss(model.forward(in.ids, in.types), in.labels);
}

// Flat gradient of `model` in state_dict order.
at::Tensor flat_grad(TaskModel& model) {
  std::vector<at::Tensor> parts;
  for (auto& kv : model.state_dict()) parts.push_back(kv.second.grad().reshape({-1}));
  return torch::cat(parts);
}

}  // namespace

TEST_CASE("DDP gradients are the rank average, reduced in buckets while backward runs") {
  int rank = 0, W = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &W);
  MpiCommunicator comm(MPI_COMM_WORLD);

  auto model = std::make_shared<TaskModel>(tiny());
  model->init_weights(rank == 0 ? 5 : 6);  // differ on purpose: broadcast must fix it
  AdamWOptions adamw;
  DdpOptions options;
  options.bucket_cap_mb = 0.004;  // ~1000 floats: many buckets
  DataParallel ddp(*model, comm, adamw, options);
  ddp.broadcast_parameters(0);

  auto reference = std::make_shared<TaskModel>(tiny());
  reference->init_weights(5);
  const int64_t numel = ddp.layout().numel();
  CHECK(at::equal(ddp.flat_params().narrow(0, 0, numel),
                  torch::cat([&] {
                    std::vector<at::Tensor> v;
                    for (auto& kv : reference->state_dict()) v.push_back(kv.second.detach().reshape({-1}));
                    return v;
                  }())));

  // Buckets tile [0, numel) from the end backwards.
  const auto buckets = ddp.buckets();
  REQUIRE(buckets.size() > 4);
  CHECK(buckets.front().end == numel);
  CHECK(buckets.back().begin == 0);
  for (size_t b = 1; b < buckets.size(); ++b) CHECK(buckets[b].end == buckets[b - 1].begin);

  SUBCASE("one micro-step") {
    ddp.zero_grad();
    ddp.prepare_backward(true);
    loss_of(*model, inputs_for(rank, 0)).backward();
    ddp.finish_backward();
    CHECK(ddp.stats().buckets_during_backward > 0);
    CHECK(ddp.stats().buckets_total == static_cast<int64_t>(buckets.size()));

    at::Tensor expected = at::zeros({numel}, at::kFloat);
    for (int r = 0; r < W; ++r) {
      reference->zero_grad();
      loss_of(*reference, inputs_for(r, 0)).backward();
      expected += flat_grad(*reference);
    }
    expected /= W;
    const double diff = (ddp.flat_grads().narrow(0, 0, numel) - expected).abs().max().item<double>();
    MESSAGE("max |grad - reference| " << diff);
    CHECK(diff < 1e-6);  // fp32 sums of W terms in another order
    // The module's .grad tensors are views of the flat buffer.
    CHECK(model->parameter("classifier.weight").grad().data_ptr() ==
          ddp.flat_grads().narrow(0, ddp.layout().slot("classifier.weight").offset, 1).data_ptr());
  }

  SUBCASE("two accumulated micro-steps, reduced once") {
    ddp.zero_grad();
    ddp.prepare_backward(false);
    (loss_of(*model, inputs_for(rank, 0)) / 2).backward();
    CHECK(ddp.stats().buckets_total == 0);  // no_sync: nothing launched
    ddp.prepare_backward(true);
    (loss_of(*model, inputs_for(rank, 1)) / 2).backward();
    ddp.finish_backward();

    at::Tensor expected = at::zeros({numel}, at::kFloat);
    for (int r = 0; r < W; ++r)
      for (int m = 0; m < 2; ++m) {
        reference->zero_grad();
        (loss_of(*reference, inputs_for(r, m)) / 2).backward();
        expected += flat_grad(*reference);
      }
    expected /= W;
    CHECK((ddp.flat_grads().narrow(0, 0, numel) - expected).abs().max().item<double>() < 1e-6);
  }

  SUBCASE("a step updates the module's parameters in place and identically on all ranks") {
    ddp.zero_grad();
    ddp.prepare_backward(true);
    loss_of(*model, inputs_for(rank, 0)).backward();
    ddp.finish_backward();
    const at::Tensor before = model->parameter("classifier.weight").detach().clone();
    const double norm = ddp.step({1e-2, 1.0}).grad_norm;
    CHECK(norm > 0);
    CHECK_FALSE(at::equal(before, model->parameter("classifier.weight").detach()));
    at::Tensor mine = ddp.flat_params().clone();
    at::Tensor root = mine.clone();
    comm.broadcast(root, 0);
    CHECK(at::equal(mine, root));
    CHECK(ddp.optimizer_step() == 1);
  }

  SUBCASE("checkpoint parts tile the layout") {
    FlatPart part = ddp.checkpoint_parts().front();
    int64_t count = part.params.numel();
    MPI_Allreduce(MPI_IN_PLACE, &count, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    CHECK(count == numel);
    CHECK(part.exp_avg.numel() == part.params.numel());
  }
}

}  // namespace ddp_mpi_test
