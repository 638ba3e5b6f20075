// Activation checkpointing (model/activation_checkpoint.h): a block run with
// checkpointed_forward gives the plain run's output, input gradient and
// parameter gradients, bit for bit, with dropout on (the recomputation
// replays the forward's random numbers); afterwards the generator is where the
// plain run leaves it; parameter gradients arrive through AccumulateGrad (the
// hooks strategies use fire once per parameter); no_grad is a plain call.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "shardtrain/model/activation_checkpoint.h"
#include "shardtrain/model/task_model.h"
#include "support/train_fixtures.h"

using namespace shardtrain;

namespace activation_checkpoint_test {
namespace {

struct Block {
  mutable torch::nn::Linear up{8, 16}, down{16, 8};
  Block() {
    torch::manual_seed(3);
    up = torch::nn::Linear(8, 16);
    down = torch::nn::Linear(16, 8);
  }
  std::vector<at::Tensor> params() const {
    std::vector<at::Tensor> out = up->parameters();
    for (const at::Tensor& p : down->parameters()) out.push_back(p);
    return out;
  }
  at::Tensor forward(const at::Tensor& x) const {
    at::Tensor h = at::gelu(up->forward(x));
    h = at::dropout(h, 0.3, /*train=*/true);
    return at::dropout(down->forward(h), 0.1, true) + x;
  }
};

struct Outcome {
  at::Tensor output, input_grad, after;  // `after`: a random draw after backward
  std::vector<at::Tensor> grads;
};

struct CountingHook : public torch::autograd::FunctionPostHook {
  explicit CountingHook(int& count) : count_(count) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    ++count_;
    return outputs;
  }
  int& count_;
};

Outcome run(bool checkpoint, int blocks) {
  Block block;
  torch::manual_seed(11);
  at::Tensor x = at::randn({4, 5, 8}).requires_grad_(true);
  at::Tensor h = x;
  for (int i = 0; i < blocks; ++i)
    h = checkpoint ? checkpointed_forward([&block](const at::Tensor& in) { return block.forward(in); }, h,
                                          block.params())
                   : block.forward(h);
  at::Tensor loss = (h * h).sum();
  loss.backward();
  Outcome o{h.detach(), x.grad().clone(), at::rand({3}), {}};
  for (const at::Tensor& p : block.params()) o.grads.push_back(p.grad().clone());
  return o;
}

}  // namespace

TEST_CASE("checkpointed blocks give the plain run's output and gradients, dropout on") {
  for (int blocks : {1, 3}) {
    const Outcome plain = run(false, blocks), checkpointed = run(true, blocks);
    CHECK(at::equal(plain.output, checkpointed.output));
    CHECK(at::equal(plain.input_grad, checkpointed.input_grad));
    REQUIRE(plain.grads.size() == checkpointed.grads.size());
    for (size_t k = 0; k < plain.grads.size(); ++k) CHECK(at::equal(plain.grads[k], checkpointed.grads[k]));
    CHECK(at::equal(plain.after, checkpointed.after));  // the generator goes on as without checkpointing
  }
}

TEST_CASE("parameter gradients pass through AccumulateGrad once each, from the checkpoint's own node") {
  Block block;
  int fired = 0;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
  for (const at::Tensor& p : block.params()) {
    auto accumulator = torch::autograd::impl::grad_accumulator(p);
    accumulator->add_post_hook(std::make_unique<CountingHook>(fired));
    accumulators.push_back(accumulator);
  }
  at::Tensor x = at::randn({2, 3, 8}).requires_grad_(true);
  at::Tensor y = checkpointed_forward([&block](const at::Tensor& in) { return block.forward(in); }, x, block.params());
  CHECK(y.grad_fn()->name() == "shardtrain::CheckpointBackward");
  CHECK(y.grad_fn()->num_outputs() == 1 + block.params().size());
  y.sum().backward();
  CHECK(fired == static_cast<int>(block.params().size()));
}

TEST_CASE("under no_grad it is a plain call") {
  Block block;
  at::NoGradGuard no_grad;
  at::Tensor x = at::randn({2, 3, 8});
  torch::manual_seed(5);
  const at::Tensor plain = block.forward(x);
  torch::manual_seed(5);
  const at::Tensor y = checkpointed_forward([&block](const at::Tensor& in) { return block.forward(in); }, x,
                                            block.params());
  CHECK(at::equal(plain, y));
  CHECK_FALSE(y.requires_grad());
}

}  // namespace activation_checkpoint_test

namespace activation_checkpoint_test {
namespace {

// Records the grad_fn of each unit's output.
struct GradFnNames : public UnitHooks {
  std::vector<std::string> names;
  void before_forward(int64_t) override {}
  at::Tensor after_forward(int64_t, at::Tensor output) override {
    names.push_back(output.grad_fn() ? output.grad_fn()->name() : "");
    return output;
  }
};

// The tests' tiny BERT with one more layer and dropout on.
EncoderConfig small_bert() {
  EncoderConfig c = shardtrain_test::tiny_bert_config();
  c.num_hidden_layers = 3;
  c.hidden_dropout_prob = 0.1;
  c.attention_probs_dropout_prob = 0.1;
  return c;
}

// Trains-mode forward + backward of one batch; returns every parameter's gradient.
std::vector<at::Tensor> bert_grads(bool checkpointing, bool unpadded, std::vector<std::string>* grad_fns) {
  TaskModel model(small_bert());
  model.init_weights(5);
  model.set_gradient_checkpointing(checkpointing);
  model.set_unpadded(unpadded);
  model.train();
  GradFnNames hooks;
  model.set_unit_hooks(&hooks);
  Batch b;
  b.input_ids = at::tensor({2, 7, 9, 3, 0, 0, 2, 5, 6, 8, 11, 3}, at::kLong).view({2, 6});
  b.attention_mask = (b.input_ids != 0).to(at::kLong);
  b.attention_mask[1].fill_(1);
  b.token_type_ids = at::zeros_like(b.input_ids);
  b.labels = at::tensor({1, 0}, at::kLong);
  torch::manual_seed(21);
  model.loss(model.forward_batch(b), b.labels).backward();
  model.set_unit_hooks(nullptr);
  if (grad_fns) *grad_fns = hooks.names;
  std::vector<at::Tensor> grads;
  for (const auto& [name, p] : model.state_dict()) grads.push_back(p.grad().clone());
  return grads;
}

}  // namespace

TEST_CASE("BERT with gradient_checkpointing: each encoder layer is one checkpoint node; gradients equal the plain run") {
  for (const bool unpadded : {false, true}) {
    CAPTURE(unpadded);
    std::vector<std::string> plain_fns, checkpointed_fns;
    const std::vector<at::Tensor> plain = bert_grads(false, unpadded, &plain_fns);
    const std::vector<at::Tensor> checkpointed = bert_grads(true, unpadded, &checkpointed_fns);
    REQUIRE(checkpointed_fns.size() == 5);  // embeddings, 3 layers, head
    for (size_t unit = 1; unit <= 3; ++unit) {
      CHECK(checkpointed_fns[unit] == "shardtrain::CheckpointBackward");
      CHECK(plain_fns[unit] != "shardtrain::CheckpointBackward");
    }
    CHECK(checkpointed_fns[0] != "shardtrain::CheckpointBackward");  // HF checkpoints the encoder layers only
    REQUIRE(plain.size() == checkpointed.size());
    for (size_t i = 0; i < plain.size(); ++i) CHECK(at::equal(plain[i], checkpointed[i]));
  }
}

}  // namespace activation_checkpoint_test
