// TaskModel::forward_packed (unpadded BERT) against the
// padded forward() and the float64 golden reference: logits and the gradient
// of every parameter, on random batches of varied lengths; the unit hooks in
// the same order; dropout training; the word-embedding gradient added in place
// into an existing dense .grad; bad packed inputs refused with a message.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "shardtrain/core/check.h"
#include "shardtrain/data/collator.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/model/dropout.h"
#include "shardtrain/model/hf_folder.h"
#include "shardtrain/model/safetensors.h"

using namespace shardtrain;

namespace bert_packed_test {
namespace {

const std::string kGolden = std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/fixtures/bert_golden/";

// Packed vs padded, both fp32: the same operations on the same real-token
// values; only the row counts of the matmuls differ (T vs B x L), so BLAS may
// block and sum them in another order: differences of a few fp32 ulps
// (~1e-7 relative) per op, ~1e-6 after the layers. 1e-5 (absolute plus
// relative) leaves 10x room; a real mistake (a wrong position, a token
// attending to padding, a lost bias) moves logits by >= 1e-3.
constexpr double kPackedTol = 1e-5;
// Against the float64 golden values: test_bert.cpp's tolerances and reasons.
constexpr double kGoldenLogitTol = 1e-5;
constexpr double kGoldenGradTol = 1e-4;

double excess(const at::Tensor& got, const at::Tensor& want, double tol) {
  at::Tensor g = got.detach().to(at::kDouble), w = want.detach().to(at::kDouble);
  return ((g - w).abs() - (tol + tol * w.abs())).max().item<double>();
}

EncoderConfig small_config(const std::string& act = "gelu") {
  EncoderConfig c;
  c.vocab_size = 97;
  c.hidden_size = 32;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.intermediate_size = 64;
  c.max_position_embeddings = 40;
  c.hidden_act = act;
  c.hidden_dropout_prob = 0;
  c.attention_probs_dropout_prob = 0;
  c.set_num_labels(3);
  return c;
}

// B rows of random lengths in [1, max_length], right-padded with pad id 0.
Batch random_batch(int64_t B, int64_t max_length, int64_t vocab, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  const at::Tensor lengths = at::randint(1, max_length + 1, {B}, gen, at::kLong);
  const int64_t L = lengths.max().item<int64_t>();
  Batch b;
  b.input_ids = at::randint(1, vocab, {B, L}, gen, at::kLong);
  b.token_type_ids = at::randint(0, 2, {B, L}, gen, at::kLong);
  b.attention_mask = (at::arange(L, at::kLong).unsqueeze(0) < lengths.unsqueeze(1)).to(at::kLong);
  b.input_ids.masked_fill_(b.attention_mask == 0, 0);
  b.token_type_ids.masked_fill_(b.attention_mask == 0, 0);
  b.labels = at::randint(0, 3, {B}, gen, at::kLong);
  b.num_real_tokens = lengths.sum().item<int64_t>();
  b.num_total_tokens = B * L;
  return b;
}

at::Tensor packed_logits(TaskModel& model, const PackedBatch& p) {
  return model.forward_packed(p.input_ids, p.token_type_ids, p.position_ids, p.cu_seqlens, p.max_seqlen);
}

// Logits and every parameter's gradient of one forward + backward.
struct Outcome {
  at::Tensor logits;
  std::vector<std::pair<std::string, at::Tensor>> grads;
};

template <class Forward>
Outcome run(TaskModel& model, const at::Tensor& labels, Forward forward) {
  model.zero_grad();
  Outcome out;
  out.logits = forward();
  model.loss(out.logits, labels).backward();
  for (const auto& [name, p] : model.state_dict()) out.grads.emplace_back(name, p.grad().clone());
  return out;
}

// Records the unit hook calls and the shapes the hooks see.
class RecordingHooks : public UnitHooks {
 public:
  std::vector<std::string> calls;
  int backward_hooks_fired = 0;
  void before_forward(int64_t unit) override { calls.push_back("before " + std::to_string(unit)); }
  at::Tensor after_forward(int64_t unit, at::Tensor output) override {
    std::string shape;
    for (int64_t s : output.sizes()) shape += (shape.empty() ? "" : "x") + std::to_string(s);
    calls.push_back("after " + std::to_string(unit) + " " + shape);
    if (output.requires_grad()) output.register_hook([this](const at::Tensor&) { ++backward_hooks_fired; });
    return output;
  }
};

}  // namespace

TEST_CASE("packed forward: logits and every gradient equal the padded forward's on random batches") {
  for (const char* act : {"gelu", "gelu_new"}) {
    for (uint64_t seed : {1u, 2u, 3u}) {
      CAPTURE(act);
      CAPTURE(seed);
      auto model = std::make_shared<TaskModel>(small_config(act));
      model->init_weights(seed);
      model->train();  // dropout probabilities are 0: train mode with deterministic math
      const Batch padded = random_batch(6, 29, 97, 100 + seed);
      const PackedBatch packed = pack_batch(padded);
      REQUIRE(packed.num_real_tokens < padded.num_total_tokens);  // the batch has padding to remove

      const Outcome want = run(*model, padded.labels, [&] {
        return model->forward(padded.input_ids, padded.token_type_ids, padded.attention_mask);
      });
      const Outcome got = run(*model, packed.labels, [&] { return packed_logits(*model, packed); });
      CHECK(excess(got.logits, want.logits, kPackedTol) <= 0);
      REQUIRE(got.grads.size() == want.grads.size());
      double worst = 0;
      for (size_t i = 0; i < got.grads.size(); ++i) {
        CAPTURE(got.grads[i].first);
        CHECK(excess(got.grads[i].second, want.grads[i].second, kPackedTol) <= 0);
        worst = std::max(worst, (got.grads[i].second - want.grads[i].second).abs().max().item<double>());
      }
      std::printf("packed vs padded (%s, seed %llu): logits max|diff| %.2e, gradients max|diff| %.2e\n", act,
                  static_cast<unsigned long long>(seed), (got.logits - want.logits).abs().max().item<double>(), worst);
    }
  }
}

TEST_CASE("packed forward matches the float64 golden reference") {
  for (const char* name : {"tiny_gelu_l1", "small_gelu_new_l2", "regression_l3"}) {
    CAPTURE(name);
    HfModel hf = load_hf_folder(kGolden + name);
    const NamedTensors golden = SafetensorsFile(kGolden + name + "/golden.safetensors").all_tensors();
    auto get = [&golden](const std::string& key) {
      for (const auto& [n, t] : golden)
        if (n == key) return t;
      FAIL("golden tensor missing: " << key);
      return at::Tensor();
    };
    Batch padded;
    padded.input_ids = get("input_ids");
    padded.token_type_ids = get("token_type_ids");
    padded.attention_mask = get("attention_mask");
    padded.labels = get("labels");
    const PackedBatch packed = pack_batch(padded);
    auto& model = *hf.model;
    model.eval();
    model.zero_grad();
    at::Tensor logits = packed_logits(model, packed);
    model.loss(logits, packed.labels).backward();
    CHECK(excess(logits, get("logits"), kGoldenLogitTol) <= 0);
    for (const auto& [param_name, param] : model.state_dict()) {
      CAPTURE(param_name);
      REQUIRE(param.grad().defined());
      CHECK(excess(param.grad(), get("grad." + param_name), kGoldenGradTol) <= 0);
    }
  }
}

TEST_CASE("packed eval (no grad) gives the padded logits; default positions and types") {
  auto model = std::make_shared<TaskModel>(small_config());
  model->init_weights(11);
  model->eval();
  at::NoGradGuard no_grad;
  Batch padded = random_batch(5, 17, 97, 7);
  padded.token_type_ids.zero_();
  const PackedBatch packed = pack_batch(padded);
  const at::Tensor want = model->forward(padded.input_ids, {}, padded.attention_mask);
  CHECK(excess(packed_logits(*model, packed), want, kPackedTol) <= 0);
  // Undefined token types = 0, undefined positions = 0..n_b-1 per sequence.
  const at::Tensor defaults = model->forward_packed(packed.input_ids, {}, {}, packed.cu_seqlens, packed.max_seqlen);
  CHECK(excess(defaults, want, kPackedTol) <= 0);
  // The first sequence alone gives its logits in the batch: no sequence sees another's tokens.
  const at::Tensor alone = model->forward_packed(packed.input_ids.narrow(0, 0, packed.cu_seqlens[1].item<int64_t>()),
                                                 {}, {}, packed.cu_seqlens.narrow(0, 0, 2), packed.max_seqlen);
  CHECK(excess(alone, want.narrow(0, 0, 1), kPackedTol) <= 0);
}

TEST_CASE("packed forward runs the unit hooks around the same units, in the same order") {
  auto model = std::make_shared<TaskModel>(small_config());
  model->init_weights(3);
  const Batch padded = random_batch(4, 12, 97, 5);
  const PackedBatch packed = pack_batch(padded);
  RecordingHooks padded_hooks, packed_hooks;
  model->set_unit_hooks(&padded_hooks);
  model->loss(model->forward(padded.input_ids, padded.token_type_ids, padded.attention_mask), padded.labels)
      .backward();
  model->set_unit_hooks(&packed_hooks);
  model->loss(packed_logits(*model, packed), packed.labels).backward();
  model->set_unit_hooks(nullptr);

  const int64_t units = model->num_units(), T = packed.num_real_tokens, D = 32;
  const int64_t B = padded.size(), L = padded.input_ids.size(1);
  REQUIRE(packed_hooks.calls.size() == static_cast<size_t>(2 * units));
  REQUIRE(padded_hooks.calls.size() == packed_hooks.calls.size());
  for (int64_t u = 0; u < units; ++u) {
    CAPTURE(u);
    const std::string shape = u + 1 < units ? std::to_string(T) + "x" + std::to_string(D) : std::to_string(B) + "x3";
    const std::string padded_shape =
        u + 1 < units ? std::to_string(B) + "x" + std::to_string(L) + "x" + std::to_string(D) : std::to_string(B) + "x3";
    CHECK(packed_hooks.calls[2 * u] == "before " + std::to_string(u));
    CHECK(packed_hooks.calls[2 * u + 1] == "after " + std::to_string(u) + " " + shape);
    CHECK(padded_hooks.calls[2 * u] == "before " + std::to_string(u));
    CHECK(padded_hooks.calls[2 * u + 1] == "after " + std::to_string(u) + " " + padded_shape);
  }
  // Every unit's output hook fired in backward (strategies gather for backward there).
  CHECK(packed_hooks.backward_hooks_fired == units);
  CHECK(padded_hooks.backward_hooks_fired == units);
}

TEST_CASE("packed training with dropout learns a small task") {
  EncoderConfig config = small_config();
  config.hidden_dropout_prob = 0.1;
  config.attention_probs_dropout_prob = 0.1;
  auto model = std::make_shared<TaskModel>(config);
  model->init_weights(21);
  model->train();
  torch::manual_seed(5);
  // Label = whether token 7 occurs in the row: learnable only through attention to the right tokens.
  Batch padded = random_batch(16, 20, 97, 9);
  padded.labels = ((padded.input_ids == 7) | (padded.input_ids == 8)).any(1).to(at::kLong);
  padded.input_ids.select(1, 0).fill_(1);  // a [CLS]-like first token
  const PackedBatch packed = pack_batch(padded);
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(3e-3));
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    optimizer.zero_grad();
    at::Tensor loss = model->loss(packed_logits(*model, packed), packed.labels);
    loss.backward();
    optimizer.step();
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
    REQUIRE(std::isfinite(last));
  }
  // Dropout draws other masks than the padded layout would; training still fits the batch.
  std::printf("packed training with dropout: loss %.4f -> %.4f\n", first, last);
  CHECK(last < 0.5 * first);
}

// The model's math written out with plain ATen ops and autograd (at::matmul,
// at::softmax; dropout from model/dropout.h, which draws the model's masks):
// what HF's eager BERT does, for the check below.
at::Tensor reference_logits(TaskModel& m, const Batch& b) {
  const EncoderConfig& c = m.config();
  const int64_t B = b.input_ids.size(0), L = b.input_ids.size(1), H = c.num_attention_heads, Dh = c.head_dim();
  auto p = [&](const std::string& name) { return m.parameter(name); };
  auto linear = [&](const at::Tensor& in, const std::string& name) {
    return at::linear(in, p(name + ".weight"), p(name + ".bias"));
  };
  auto norm = [&](const at::Tensor& in, const std::string& name) {
    return at::layer_norm(in, {c.hidden_size}, p(name + ".weight"), p(name + ".bias"), c.layer_norm_eps);
  };
  at::Tensor x = at::embedding(p("bert.embeddings.word_embeddings.weight"), b.input_ids) +
                 at::embedding(p("bert.embeddings.token_type_embeddings.weight"), b.token_type_ids) +
                 at::embedding(p("bert.embeddings.position_embeddings.weight"), at::arange(L, at::kLong));
  x = norm(x, "bert.embeddings.LayerNorm");
  const at::Tensor mask = (1.0 - b.attention_mask.to(at::kFloat)).mul(std::numeric_limits<float>::lowest()).view({B, 1, 1, L});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string layer = "bert.encoder.layer." + std::to_string(i) + ".";
    auto heads = [&](const std::string& name) { return linear(x, layer + name).view({B, L, H, Dh}).transpose(1, 2); };
    at::Tensor scores = at::matmul(heads("attention.self.query"), heads("attention.self.key").transpose(-1, -2)) /
                            std::sqrt(double(Dh)) + mask;
    at::Tensor probs = shardtrain::dropout(at::softmax(scores, -1), c.attention_probs_dropout_prob, true);
    at::Tensor context = at::matmul(probs, heads("attention.self.value")).transpose(1, 2).reshape({B, L, c.hidden_size});
    at::Tensor attended = norm(linear(context, layer + "attention.output.dense") + x, layer + "attention.output.LayerNorm");
    x = norm(linear(at::gelu(linear(attended, layer + "intermediate.dense")), layer + "output.dense") + attended,
             layer + "output.LayerNorm");
  }
  return linear(at::tanh(linear(x.select(1, 0), "bert.pooler.dense")), "classifier");
}

TEST_CASE("attention dropout: the CPU attention kernel applies dropout's masks and backpropagates as autograd") {
  EncoderConfig config = small_config();
  config.attention_probs_dropout_prob = 0.3;  // the only dropout: the RNG feeds the attention masks alone
  auto model = std::make_shared<TaskModel>(config);
  model->init_weights(12);
  model->train();
  const Batch padded = random_batch(5, 13, 97, 8);
  torch::manual_seed(77);
  const Outcome want = run(*model, padded.labels, [&] { return reference_logits(*model, padded); });
  torch::manual_seed(77);
  const Outcome got = run(*model, padded.labels, [&] {
    return model->forward(padded.input_ids, padded.token_type_ids, padded.attention_mask);
  });
  // Another seed draws other masks: the comparison above is not blind to dropout.
  torch::manual_seed(78);
  const at::Tensor other = model->forward(padded.input_ids, padded.token_type_ids, padded.attention_mask);
  CHECK(excess(got.logits, want.logits, kPackedTol) <= 0);
  CHECK(excess(other, want.logits, kPackedTol) > 0);
  for (size_t i = 0; i < got.grads.size(); ++i) {
    CAPTURE(got.grads[i].first);
    CHECK(excess(got.grads[i].second, want.grads[i].second, kPackedTol) <= 0);
  }
}

// Mixed precision through the CPU kernels: a bf16 copy of the model, with
// attention and hidden dropout on, follows the fp32 model on the same batch,
// padded and packed. The dropout masks are the same (16-bit tensors get the
// fp32 mask), LayerNorm, softmax and the loss run in fp32; what remains is
// bf16 rounding: 8 significant bits per matmul input, a few 2^-8 relative
// through the layers. Bound: every logit and gradient within 5e-2 of the fp32
// one relative to that tensor's largest fp32 value (measured: <= 2e-2). A
// mask mismatch, a softmax in bf16 without fp32 accumulation at these sizes,
// or a wrong gradient formula moves them by O(1).
TEST_CASE("bf16 forward and backward follow fp32 through the CPU attention and dropout kernels") {
  EncoderConfig config = small_config();
  config.attention_probs_dropout_prob = 0.2;
  config.hidden_dropout_prob = 0.1;
  auto fp32 = std::make_shared<TaskModel>(config);
  fp32->init_weights(21);
  auto bf16 = std::make_shared<TaskModel>(config);
  bf16->init_weights(21);
  bf16->to(at::kBFloat16);
  fp32->train();
  bf16->train();
  const Batch padded = random_batch(6, 17, 97, 31);
  auto relative_error = [](const at::Tensor& got, const at::Tensor& want) {
    const at::Tensor w = want.detach().to(at::kDouble);
    return ((got.detach().to(at::kDouble) - w).abs().max() / w.abs().max().clamp_min(1e-12)).item<double>();
  };
  for (const bool unpadded : {false, true}) {
    CAPTURE(unpadded);
    fp32->set_unpadded(unpadded);
    bf16->set_unpadded(unpadded);
    torch::manual_seed(5);
    const Outcome want = run(*fp32, padded.labels, [&] { return fp32->forward_batch(padded); });
    torch::manual_seed(5);
    const Outcome got = run(*bf16, padded.labels, [&] { return bf16->forward_batch(padded); });
    CHECK((got.logits.scalar_type() == at::kBFloat16));
    double worst = relative_error(got.logits, want.logits), largest = 0;
    for (const auto& [name, g] : want.grads) largest = std::max(largest, g.abs().max().item<double>());
    for (size_t i = 0; i < got.grads.size(); ++i) {
      CAPTURE(got.grads[i].first);
      // The key bias's gradient is zero in exact arithmetic (softmax ignores a
      // constant per row): its rounding noise is measured against 1 % of the
      // largest gradient instead of its own (~1e-10) size.
      const at::Tensor& w = want.grads[i].second;
      const double scale = std::max(w.abs().max().item<double>(), 1e-2 * largest);
      const double e = (got.grads[i].second.to(at::kDouble) - w.to(at::kDouble)).abs().max().item<double>() / scale;
      CHECK(e <= 5e-2);
      worst = std::max(worst, e);
    }
    CHECK(relative_error(got.logits, want.logits) <= 5e-2);
    MESSAGE("bf16 vs fp32, unpadded " << unpadded << ": worst relative error " << worst);
  }
}

TEST_CASE("word-embedding gradient: added in place into an existing dense .grad, equal to the dense one") {
  auto model = std::make_shared<TaskModel>(small_config());
  model->init_weights(4);
  const Batch padded = random_batch(5, 15, 97, 3);
  at::Tensor weight = model->parameter("bert.embeddings.word_embeddings.weight");

  // No .grad yet: PyTorch's dense gradient, and .grad stays dense.
  model->zero_grad();
  model->loss(model->forward(padded.input_ids, padded.token_type_ids, padded.attention_mask), padded.labels)
      .backward();
  REQUIRE(weight.grad().defined());
  CHECK(weight.grad().layout() == at::kStrided);
  const at::Tensor dense = weight.grad().clone();
  CHECK(dense[0].abs().sum().item<double>() == 0.0);  // the padding row
  CHECK(dense.abs().sum().item<double>() > 0.0);

  // An existing dense .grad (as a strategy's flat-buffer view): accumulated in place.
  at::Tensor buffer = at::full_like(weight, 0.5);
  weight.mutable_grad() = buffer;
  const void* storage = buffer.data_ptr();
  model->loss(model->forward(padded.input_ids, padded.token_type_ids, padded.attention_mask), padded.labels)
      .backward();
  CHECK(weight.grad().layout() == at::kStrided);
  CHECK(weight.grad().data_ptr() == storage);
  // Sums of the same per-token rows, in another order: fp32 rounding only.
  CHECK(excess(weight.grad() - 0.5, dense, 1e-6) <= 0);
  CHECK((weight.grad()[0] - 0.5).abs().max().item<double>() == 0.0);
}

TEST_CASE("forward_packed refuses inconsistent packed inputs with a message") {
  auto model = std::make_shared<TaskModel>(small_config());
  model->init_weights(1);
  const at::Tensor ids = torch::tensor({5, 6, 7, 8, 9}, torch::kLong);
  auto fails = [&](const at::Tensor& input_ids, const at::Tensor& cu, int64_t max_seqlen, const char* expected) {
    CAPTURE(expected);
    CHECK_THROWS_WITH_AS(model->forward_packed(input_ids, {}, {}, cu, max_seqlen), doctest::Contains(expected), Error);
  };
  fails(ids, torch::tensor({0, 2, 5}, torch::kLong), 2, "sequence 1 has 3 tokens");
  fails(ids, torch::tensor({1, 2, 5}, torch::kLong), 3, "must start at 0");
  fails(ids, torch::tensor({0, 2, 2, 5}, torch::kLong), 3, "sequence 1 has 0 tokens");
  // Decreasing bounds: refused before anything is sized from them (bounds[B] = 3 < 5).
  fails(ids, torch::tensor({0, 5, 3}, torch::kLong), 5, "sequence 1 has -2 tokens");
  fails(ids, torch::tensor({0, 2, 4}, torch::kLong), 3, "cu_seqlens ends at 4 but input_ids has 5 tokens");
  fails(ids, torch::tensor({0, 5}, torch::kLong), 41, "exceeds the 40 positions of this bert model");
  fails(ids.view({1, 5}), torch::tensor({0, 5}, torch::kLong), 5, "input_ids must be [T]");
  CHECK_THROWS_WITH_AS(model->forward_packed(ids, torch::zeros({4}, torch::kLong), {}, torch::tensor({0, 5}), 5),
                       doctest::Contains("must be [T] = [5]"), Error);
  CHECK(model->forward_packed(ids, {}, {}, torch::tensor({0, 2, 5}, torch::kLong), 3).sizes() ==
        at::IntArrayRef({2, 3}));
}

}  // namespace bert_packed_test
