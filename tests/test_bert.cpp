// TaskModel against an independent float64 PyTorch
// reference (tests/fixtures/make_bert_golden.py): logits, loss and the gradient
// of every parameter, per tensor, printed OK / NOT OK.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "shardtrain/core/check.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/model/hf_folder.h"
#include "shardtrain/model/safetensors.h"

using namespace shardtrain;

namespace {

const std::string kGolden = std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/fixtures/bert_golden/";

// Tolerances, elementwise |got - want| <= atol + rtol * |want|, want = fp64 truth
// rounded to fp32. The model runs in fp32 (unit roundoff 6e-8); activations are
// O(1) and pass through <= 3 layers of LayerNorm/softmax/matmul with reductions
// of <= 64 terms, which keeps forward error near 1e-6. Gradients chain through
// the same ops backwards, involve 1/sigma of LayerNorm and sums over B*L rows, so
// they get 10x more room. A real mistake (erf vs tanh GELU, a missing bias, a
// wrong mask) moves results by >= 1e-3 (see "tolerances catch a wrong activation").
constexpr double kLogitTol = 1e-5;
constexpr double kGradTol = 1e-4;

double worst_excess(const at::Tensor& got, const at::Tensor& want, double tol) {
  at::Tensor g = got.detach().to(at::kDouble), w = want.to(at::kDouble);
  return ((g - w).abs() - (tol + tol * w.abs())).max().item<double>();
}

struct Golden {
  HfModel hf;
  NamedTensors tensors;
  at::Tensor get(const std::string& name) const {
    for (const auto& [n, t] : tensors)
      if (n == name) return t;
    FAIL("golden tensor missing: " << name);
    return {};
  }
};

Golden load_golden(const std::string& name) {
  Golden g;
  g.hf = load_hf_folder(kGolden + name);
  g.tensors = SafetensorsFile(kGolden + name + "/golden.safetensors").all_tensors();
  return g;
}

at::Tensor golden_logits(Golden& g) {
  return g.hf.model->forward(g.get("input_ids"), g.get("token_type_ids"), g.get("attention_mask"));
}

}  // namespace

TEST_CASE("logits, loss and every gradient match the float64 reference") {
  for (const char* name : {"tiny_gelu_l1", "small_gelu_new_l2", "regression_l3"}) {
    CAPTURE(name);
    Golden g = load_golden(name);
    CHECK(g.hf.report.missing_keys.empty());
    CHECK(g.hf.report.unexpected_keys.empty());
    auto& model = *g.hf.model;
    model.eval();
    model.zero_grad();
    at::Tensor logits = golden_logits(g);
    at::Tensor loss = model.loss(logits, g.get("labels"));
    loss.backward();

    std::printf("%s\n", name);
    const double logit_excess = worst_excess(logits, g.get("logits"), kLogitTol);
    std::printf("  %-6s %-55s max|diff| %.2e\n", logit_excess <= 0 ? "OK" : "NOT OK", "logits",
                (logits.detach() - g.get("logits")).abs().max().item<double>());
    CHECK(logit_excess <= 0);
    CHECK(worst_excess(loss, g.get("loss"), kLogitTol) <= 0);

    int num_checked = 0;
    for (const auto& [param_name, param] : model.state_dict()) {
      CAPTURE(param_name);
      at::Tensor want = g.get("grad." + param_name);
      REQUIRE(param.grad().defined());
      const double excess = worst_excess(param.grad(), want, kGradTol);
      std::printf("  %-6s grad %-50s max|diff| %.2e\n", excess <= 0 ? "OK" : "NOT OK", param_name.c_str(),
                  (param.grad() - want).abs().max().item<double>());
      CHECK(excess <= 0);
      ++num_checked;
    }
    CHECK(num_checked == static_cast<int>(g.tensors.size()) - 6);  // all grad.* entries
  }
}

TEST_CASE("tolerances catch a wrong activation") {
  // gelu_new (tanh) and gelu (erf) differ by < 1e-3 per element; the test must see it.
  Golden g = load_golden("small_gelu_new_l2");
  EncoderConfig wrong = g.hf.config;
  wrong.hidden_act = "gelu";
  auto model = std::make_shared<TaskModel>(wrong);
  load_hf_weights(*model, g.hf.model->state_dict());
  model->eval();
  at::Tensor logits = model->forward(g.get("input_ids"), g.get("token_type_ids"), g.get("attention_mask"));
  CHECK(worst_excess(logits, g.get("logits"), kLogitTol) > 0);
}

TEST_CASE("parameter names are exactly HF's, in HF's order") {
  Golden g = load_golden("regression_l3");
  std::vector<std::string> want;
  for (const auto& [name, t] : g.tensors)
    if (name.rfind("grad.", 0) == 0) want.push_back(name.substr(5));
  std::vector<std::string> got;
  for (const auto& [name, t] : g.hf.model->state_dict()) got.push_back(name);
  CHECK(got == want);
  CHECK(got.front() == "bert.embeddings.word_embeddings.weight");
  CHECK(got.back() == "classifier.bias");
  // The units strategies walk over: embeddings, the 3 layers, the head.
  auto& model = *g.hf.model;
  REQUIRE(model.num_units() == 5);
  CHECK(model.unit_parameters(2).size() == 16);
  CHECK(model.unit_of("bert.encoder.layer.1.attention.self.query.weight") == 2);
  CHECK(model.unit_of("bert.encoder.layer.1.output.LayerNorm.bias") == 2);
  CHECK(model.unit_parameters(0).size() == 5);
  CHECK(model.unit_parameters(4).size() == 4);  // pooler + classifier
  CHECK(model.unit_of("bert.pooler.dense.weight") == 4);
  CHECK(model.parameter("classifier.weight").sizes() == at::IntArrayRef({1, 32}));
  CHECK(model.fixed_tensors().empty());  // no position_ids buffer to leak into checkpoints
}

TEST_CASE("bert-base parameter count") {
  EncoderConfig cased = bert_base_cased_config(2);
  CHECK(cased.num_parameters() == 108311810);
  EncoderConfig uncased;  // HF defaults: bert-base-uncased, vocab 30522
  CHECK(uncased.num_parameters() == 109483778);
  auto model = std::make_shared<TaskModel>(cased);
  int64_t total = 0;
  for (const auto& p : model->parameters()) total += p.numel();
  std::printf("bert-base-cased + 2-label head: %lld parameters\n", static_cast<long long>(total));
  CHECK(total == 108311810);
}

TEST_CASE("padding tokens do not change the logits") {
  Golden g = load_golden("small_gelu_new_l2");
  g.hf.model->eval();
  at::Tensor ids = g.get("input_ids").clone();
  at::Tensor mask = g.get("attention_mask");
  at::Tensor before = g.hf.model->forward(ids, g.get("token_type_ids"), mask);
  ids.masked_fill_(mask == 0, 17);  // garbage in padded positions
  at::Tensor after = g.hf.model->forward(ids, g.get("token_type_ids"), mask);
  CHECK(at::allclose(before, after, 0, 1e-6));
  // Without the mask the padding does matter (the test is not vacuous).
  at::Tensor unmasked = g.hf.model->forward(ids, g.get("token_type_ids"));
  CHECK_FALSE(at::allclose(before, unmasked, 0, 1e-4));
}

TEST_CASE("dropout only in train mode") {
  Golden g = load_golden("small_gelu_new_l2");
  auto& model = *g.hf.model;
  model.train();
  at::Tensor a = golden_logits(g), b = golden_logits(g);
  CHECK_FALSE(at::allclose(a, b));
  model.eval();
  at::Tensor c = golden_logits(g), d = golden_logits(g);
  CHECK(at::equal(c, d));
}

TEST_CASE("init_weights follows HF _init_weights and is reproducible") {
  EncoderConfig config = EncoderConfig::from_file(kGolden + "regression_l3/config.json");
  config.vocab_size = 2000;
  config.pad_token_id = 3;
  config.initializer_range = 0.05;
  auto a = std::make_shared<TaskModel>(config);
  auto b = std::make_shared<TaskModel>(config);
  auto c = std::make_shared<TaskModel>(config);
  a->init_weights(7);
  b->init_weights(7);
  c->init_weights(8);
  auto sa = a->state_dict(), sb = b->state_dict(), sc = c->state_dict();
  for (std::size_t i = 0; i < sa.size(); ++i) {
    const std::string& name = sa[i].first;
    CAPTURE(name);
    CHECK(at::equal(sa[i].second, sb[i].second));
    if (name.find("LayerNorm.weight") != std::string::npos) {
      CHECK(at::equal(sa[i].second, at::ones_like(sa[i].second)));
    } else if (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0) {
      CHECK(at::equal(sa[i].second, at::zeros_like(sa[i].second)));
    } else {
      CHECK_FALSE(at::equal(sa[i].second, sc[i].second));
    }
  }
  at::Tensor words = a->parameter("bert.embeddings.word_embeddings.weight");
  CHECK(words[3].abs().sum().item<double>() == 0.0);  // padding row
  // 64000 samples of N(0, 0.05): the sample std is within 2% with overwhelming probability.
  CHECK(words.std().item<double>() == doctest::Approx(0.05).epsilon(0.02));
  CHECK(words.mean().item<double>() == doctest::Approx(0.0).epsilon(0.001).scale(1.0));
  // Initialising a subset gives the same values as the full init (order-independent seeding).
  auto d = std::make_shared<TaskModel>(config);
  d->init_weights(7, {"classifier.weight"});
  CHECK(at::equal(d->parameter("classifier.weight"), a->parameter("classifier.weight")));
}

TEST_CASE("losses follow HF's problem types") {
  EncoderConfig config = EncoderConfig::from_file(kGolden + "small_gelu_new_l2/config.json");
  auto model = std::make_shared<TaskModel>(config);
  at::Tensor logits = torch::tensor({{1.0f, 2.0f, 0.5f}, {0.1f, -1.0f, 3.0f}});
  at::Tensor labels = torch::tensor({1, 2}, torch::kLong);
  at::Tensor log_probs = torch::log_softmax(logits, 1);
  double ce = -(log_probs[0][1].item<double>() + log_probs[1][2].item<double>()) / 2;
  CHECK(model->loss(logits, labels).item<double>() == doctest::Approx(ce).epsilon(1e-6));
  // -100 is ignored as in torch/HF.
  at::Tensor ignored = torch::tensor({1, -100}, torch::kLong);
  CHECK(model->loss(logits, ignored).item<double>() == doctest::Approx(-log_probs[0][1].item<double>()).epsilon(1e-6));
  // Float labels [B, C] with no problem_type: multi-label BCE with logits.
  at::Tensor multi = torch::tensor({{1.0f, 0.0f, 1.0f}, {0.0f, 0.0f, 1.0f}});
  at::Tensor p = torch::sigmoid(logits);
  double bce = -(multi * torch::log(p) + (1 - multi) * torch::log(1 - p)).mean().item<double>();
  CHECK(model->loss(logits, multi).item<double>() == doctest::Approx(bce).epsilon(1e-5));
}

TEST_CASE("config.json parsing, validation and round trip") {
  const std::string text = R"({"model_type": "bert", "hidden_size": 16, "num_attention_heads": 4,
      "num_hidden_layers": 2, "intermediate_size": 32, "vocab_size": 100, "max_position_embeddings": 64,
      "hidden_act": "gelu_new", "id2label": {"1": "yes", "0": "no"}, "transformers_version": "4.40.0",
      "classifier_dropout": 0.2})";
  EncoderConfig c = EncoderConfig::from_json(text, "my/config.json");
  CHECK(c.num_labels == 2);
  CHECK(c.id2label == std::vector<std::string>{"no", "yes"});
  CHECK(c.effective_classifier_dropout() == 0.2);
  CHECK(c.head_dim() == 4);
  EncoderConfig again = EncoderConfig::from_json(c.to_json());
  CHECK(again.to_json() == c.to_json());
  CHECK(again.id2label == c.id2label);
  CHECK(c.to_json().find("\"transformers_version\": \"4.40.0\"") != std::string::npos);
  CHECK(c.to_json().find("\"label2id\"") != std::string::npos);
  CHECK(c.to_json().find("\"BertForSequenceClassification\"") != std::string::npos);
  CHECK(EncoderConfig::from_json(R"({"num_labels": 5})").id2label.back() == "LABEL_4");

  auto fails = [](const std::string& json, const std::string& expected) {
    CAPTURE(json);
    CHECK_THROWS_WITH_AS(EncoderConfig::from_json(json, "x/config.json"), doctest::Contains(expected.c_str()), Error);
  };
  fails(R"({"hidden_size": 10, "num_attention_heads": 4})", "\"hidden_size\": 10 is not a multiple of num_attention_heads");
  fails(R"({"position_embedding_type": "relative_key"})", "\"position_embedding_type\"");
  fails(R"({"hidden_act": "swiglu"})", "\"hidden_act\": \"swiglu\" is not supported");
  fails(R"({"vocab_size": "big"})", "\"vocab_size\": expected an integer");
  fails(R"({"num_hidden_layers": 0})", "\"num_hidden_layers\": must be positive");
  fails(R"({"num_labels": 3, "id2label": {"0": "a", "1": "b"}})", "\"num_labels\"");
  fails(R"({"id2label": {"0": "a", "2": "b"}})", "\"id2label\"");
  fails(R"({"hidden_dropout_prob": 1.5})", "\"hidden_dropout_prob\"");
  fails(R"({"model_type": "gpt2"})", "\"model_type\": is \"gpt2\"; shardtrain trains bert, roberta");
  fails(R"({"problem_type": "regression", "num_labels": 2})", "\"problem_type\"");
  fails("{not json", "x/config.json: not valid JSON");
  for (const char* act : {"gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "quick_gelu", "relu", "silu", "swish",
                          "mish"}) {
    CAPTURE(act);
    at::Tensor x = torch::linspace(-3, 3, 13);
    CHECK(apply_activation(act, x).sizes() == x.sizes());
  }
  // gelu_pytorch_tanh and gelu_new are the same function, gelu (erf) differs.
  at::Tensor x = torch::linspace(-3, 3, 13);
  CHECK(at::allclose(apply_activation("gelu_new", x), apply_activation("gelu_pytorch_tanh", x), 1e-6, 1e-6));
  CHECK_FALSE(at::allclose(apply_activation("gelu_new", x), apply_activation("gelu", x), 1e-6, 1e-6));
}

TEST_CASE("sequences longer than max_position_embeddings are a user error") {
  EncoderConfig config = EncoderConfig::from_file(kGolden + "tiny_gelu_l1/config.json");
  auto model = std::make_shared<TaskModel>(config);
  at::Tensor ids = at::ones({1, 33}, at::kLong);
  CHECK_THROWS_WITH_AS(model->forward(ids), doctest::Contains("exceeds the 32 positions of this bert model"), Error);
}
