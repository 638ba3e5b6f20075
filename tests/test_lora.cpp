// LoRA adapters (model/lora.h, model/peft_adapter.h; docs/DESIGN.md, "LoRA"):
// PEFT's target and modules_to_save matching per family and task; the
// adapters' forward and backward against an fp64 reference that merges them
// into the base (W + scaling B A), for BERT, DeBERTa-v3 (whose shared
// position projections run through the adapted query / key Linear) and
// ModernBERT (a fused Wqkv, all-linear); merge_lora; the PEFT folder's
// config and key names against a fixture written from PEFT's rules; bad
// adapters refused by name.
#include <torch/torch.h>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"
#include "shardtrain/core/sha256.h"
#include "shardtrain/core/text.h"
#include "shardtrain/model/lora.h"
#include "shardtrain/model/peft_adapter.h"
#include "shardtrain/model/safetensors.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/train/lora_run.h"
#include "support/train_fixtures.h"

using namespace shardtrain;

namespace lora_test {
namespace {

const std::string kGolden = std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/fixtures/family_golden/";

EncoderConfig fixture_config(const std::string& name) {
  EncoderConfig c = EncoderConfig::from_file(kGolden + name + "/config.json");
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = c.embedding_dropout = 0;
  c.classifier_dropout = 0;
  return c;
}

LoraConfig options(int64_t r, std::vector<std::string> targets = {}, std::vector<std::string> save = {}) {
  LoraConfig o;
  o.r = r;
  o.alpha = 16;
  o.target_modules = std::move(targets);
  o.modules_to_save = std::move(save);
  return o;
}

std::set<std::string> target_names(const LoraSpec& spec) {
  std::set<std::string> out;
  for (const LinearModule& m : spec.targets) out.insert(m.name);
  return out;
}

struct TempDir {
  std::string path;
  TempDir() {
    char name[] = "/tmp/shardtrain_lora_XXXXXX";
    REQUIRE(mkdtemp(name) != nullptr);
    path = name;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

// Random nonzero B (PEFT starts them at zero, which would hide B's role).
void randomise_adapters(TaskModel& model, uint64_t seed) {
  at::NoGradGuard no_grad;
  auto generator = at::detail::createCPUGenerator(seed);
  for (auto& [name, t] : model.state_dict())
    if (name.find(".lora_B.") != std::string::npos) t.normal_(0.0, 0.3, generator);
}

// A batch of ids avoiding the pad id, with padding in the second row.
struct Inputs {
  at::Tensor ids, types, mask;
};
Inputs inputs(const EncoderConfig& c) {
  auto generator = at::detail::createCPUGenerator(7);
  Inputs in;
  in.ids = at::randint(c.pad_token_id + 1, c.vocab_size, {2, 7}, generator, at::kLong);
  in.mask = at::ones({2, 7}, at::kLong);
  in.mask[1].narrow(0, 5, 2).zero_();
  in.ids[1].narrow(0, 5, 2).fill_(c.pad_token_id);
  in.types = at::zeros({2, 7}, at::kLong);
  return in;
}

// The fp64 reference: the same base with each adapter merged into its
// weight, W' = W + scaling B A, trained in full. Then
//   logits(LoRA) = logits(reference)
//   dL/dA = scaling B^T dL/dW',  dL/dB = scaling dL/dW' A^T
// and the modules to save have the reference's gradients; frozen
// parameters have none.
void check_against_reference(const EncoderConfig& config, const LoraSpec& spec) {
  TaskModel model(config);
  model.init_weights(3);
  model.add_lora(spec, 5);
  randomise_adapters(model, 11);
  model.to(at::kDouble);
  model.eval();

  TaskModel reference(config);
  {
    at::NoGradGuard no_grad;
    for (const auto& [name, t] : reference.all_tensors()) t.copy_(model.parameter(name).to(at::kFloat));
  }
  reference.to(at::kDouble);
  reference.eval();
  {
    at::NoGradGuard no_grad;
    for (const LinearModule& m : spec.targets) {
      const at::Tensor a = model.parameter(m.name + ".lora_A.weight"), b = model.parameter(m.name + ".lora_B.weight");
      reference.parameter(m.name + ".weight").add_(at::matmul(b, a) * spec.scaling());
    }
  }
  const Inputs in = inputs(config);
  const at::Tensor logits = model.forward(in.ids, in.types, in.mask);
  const at::Tensor expected = reference.forward(in.ids, in.types, in.mask);
  CHECK((logits.scalar_type() == at::kDouble));
  CHECK(at::allclose(logits, expected, 1e-10, 1e-12));
  // A fixed random weighting of the logits as the objective.
  auto generator = at::detail::createCPUGenerator(13);
  const at::Tensor weights = at::randn(logits.sizes(), generator, at::kDouble);
  (logits * weights).sum().backward();
  (expected * weights).sum().backward();

  for (const LinearModule& m : spec.targets) {
    const at::Tensor a = model.parameter(m.name + ".lora_A.weight"), b = model.parameter(m.name + ".lora_B.weight");
    const at::Tensor grad_w = reference.parameter(m.name + ".weight").grad();
    CAPTURE(m.name);
    REQUIRE(a.grad().defined());
    REQUIRE(b.grad().defined());
    CHECK(at::allclose(a.grad(), at::matmul(b.t(), grad_w) * spec.scaling(), 1e-9, 1e-12));
    CHECK(at::allclose(b.grad(), at::matmul(grad_w, a.t()) * spec.scaling(), 1e-9, 1e-12));
    CHECK(at::matmul(grad_w, a.t()).abs().max().item<double>() > 1e-6);  // the check compares something
  }
  int64_t saved = 0;
  for (const auto& [name, t] : model.state_dict()) {
    if (name.find(".lora_") != std::string::npos) continue;
    CAPTURE(name);
    ++saved;
    REQUIRE(t.grad().defined());
    CHECK(at::allclose(t.grad(), reference.parameter(name).grad(), 1e-9, 1e-12));
  }
  CHECK(saved >= 2);  // the classifier's weight and bias at least
  for (const auto& [name, t] : model.frozen_state_dict()) {
    CAPTURE(name);
    CHECK(!t.requires_grad());
    CHECK(!t.grad().defined());
  }
}

}  // namespace

TEST_CASE("resolve_lora: PEFT's default targets per model type, matched by the whole name or a dotted tail") {
  const EncoderConfig bert = shardtrain_test::tiny_bert_config();
  const LoraSpec spec = resolve_lora(bert, options(4));
  CHECK(spec.target_modules == std::vector<std::string>{"query", "value"});
  CHECK(spec.modules_to_save == std::vector<std::string>{"classifier", "score"});
  CHECK(target_names(spec) == std::set<std::string>{"bert.encoder.layer.0.attention.self.query",
                                                    "bert.encoder.layer.0.attention.self.value",
                                                    "bert.encoder.layer.1.attention.self.query",
                                                    "bert.encoder.layer.1.attention.self.value"});
  CHECK(spec.scaling() == doctest::Approx(4.0));
  LoraConfig rs = options(4);
  rs.use_rslora = true;
  CHECK(resolve_lora(bert, rs).scaling() == doctest::Approx(8.0));
  // A whole dotted name matches too, and only that module.
  CHECK(target_names(resolve_lora(bert, options(2, {"bert.encoder.layer.1.attention.self.key"}))) ==
        std::set<std::string>{"bert.encoder.layer.1.attention.self.key"});
  // Any dotted tail matches ("self.query" as "query" does); a tail cut inside a part does not.
  CHECK(target_names(resolve_lora(bert, options(2, {"self.query"}))) == target_names(resolve_lora(bert, options(2, {"query"}))));
  CHECK_THROWS_WITH_AS(resolve_lora(bert, options(2, {"elf.query"})),
                       doctest::Contains("\"elf.query\" matches no Linear module"), Error);

  const EncoderConfig deberta = fixture_config("deberta_v3_l2");
  CHECK(resolve_lora(deberta, options(2)).target_modules == std::vector<std::string>{"query_proj", "value_proj"});
  for (const char* fixture : {"distilbert_l2", "modernbert_cls_l4"})
    CHECK_THROWS_WITH_AS(resolve_lora(fixture_config(fixture), options(2)),
                         doctest::Contains("PEFT has no default target modules"), Error);
}

TEST_CASE("resolve_lora: all-linear, modules_to_save and the errors that name the key") {
  const EncoderConfig bert = shardtrain_test::tiny_bert_config();
  // Sequence classification: every Linear's last name but the classifier's.
  const LoraSpec all = resolve_lora(bert, options(2, {"all-linear"}));
  CHECK(all.target_modules == std::vector<std::string>{"dense", "key", "query", "value"});
  CHECK(all.targets.size() == 2 * 6 + 1);  // q, k, v, attention out, intermediate, output per layer; the pooler
  // Token classification keeps "classifier" among the names (PEFT removes only
  // SEQ_CLS heads), but the classifier is trained in full, so it gets no adapter.
  EncoderConfig tokens = bert;
  tokens.task = Task::kTokenClassification;
  const LoraSpec token_all = resolve_lora(tokens, options(2, {"all-linear"}));
  CHECK(std::count(token_all.target_modules.begin(), token_all.target_modules.end(), "classifier") == 1);
  CHECK(target_names(token_all).count("classifier") == 0);
  // modules_to_save: "pooler" saves bert.pooler.dense in full (and takes it out of the targets).
  const LoraSpec pooled = resolve_lora(bert, options(2, {"all-linear"}, {"pooler"}));
  CHECK(pooled.saves("bert.pooler.dense.weight"));
  CHECK(target_names(pooled).count("bert.pooler.dense") == 0);
  // PEFT compares strings: "classifier" also saves DistilBERT's pre_classifier.
  const LoraSpec distil = resolve_lora(fixture_config("distilbert_l2"), options(2, {"q_lin", "v_lin"}));
  CHECK(distil.saves("pre_classifier.weight"));
  CHECK(distil.saves("classifier.bias"));
  CHECK(!distil.saves("distilbert.transformer.layer.0.attention.q_lin.weight"));
  // Question answering saves qa_outputs.
  EncoderConfig qa = bert;
  qa.task = Task::kQuestionAnswering;
  qa.set_num_labels(2);
  CHECK(resolve_lora(qa, options(2)).modules_to_save == std::vector<std::string>{"qa_outputs"});

  CHECK_THROWS_WITH_AS(resolve_lora(bert, options(0)), doctest::Contains("lora.r = 0"), Error);
  LoraConfig bad = options(2);
  bad.dropout = 1.0;
  CHECK_THROWS_WITH_AS(resolve_lora(bert, bad), doctest::Contains("lora.dropout = 1"), Error);
  bad = options(2);
  bad.alpha = 0;
  CHECK_THROWS_WITH_AS(resolve_lora(bert, bad), doctest::Contains("lora.alpha = 0"), Error);
  CHECK_THROWS_WITH_AS(resolve_lora(bert, options(2, {}, {"head"})),
                       doctest::Contains("lora.modules_to_save: \"head\" matches no module"), Error);
  CHECK_THROWS_WITH_AS(resolve_lora(bert, options(2, {"all-linear", "query"})),
                       doctest::Contains("\"all-linear\" stands alone"), Error);
  CHECK_THROWS_WITH_AS(resolve_lora(bert, options(2, {"classifier"})),
                       doctest::Contains("leaves no module to adapt outside modules_to_save"), Error);
}

TEST_CASE("lora_trainable_plan: the adapters after their module, [r, in] and [out, r]; the rest frozen") {
  const EncoderConfig bert = shardtrain_test::tiny_bert_config();
  const LoraSpec spec = resolve_lora(bert, options(3));
  const std::vector<ParameterSpec> plan = lora_trainable_plan(bert, spec);
  std::vector<std::string> names;
  for (const ParameterSpec& p : plan) names.push_back(p.name);
  REQUIRE(names.size() == 4 * 2 + 2);
  CHECK(names[0] == "bert.encoder.layer.0.attention.self.query.lora_A.weight");
  CHECK(names[1] == "bert.encoder.layer.0.attention.self.query.lora_B.weight");
  CHECK(plan[0].shape == std::vector<int64_t>{3, 16});
  CHECK(plan[1].shape == std::vector<int64_t>{16, 3});
  CHECK(plan[0].unit == 1);
  CHECK(names.back() == "classifier.bias");
  TaskModel model(bert);
  model.init_weights(1);
  model.add_lora(spec, 1);
  std::vector<std::string> state;
  for (const auto& [name, t] : model.state_dict()) state.push_back(name);
  CHECK(state == names);
  // B starts at zero (the adapted model is the base); A is U(-1/sqrt(in), 1/sqrt(in)).
  CHECK(model.parameter(names[1]).abs().max().item<double>() == 0.0);
  const double bound = 1.0 / std::sqrt(16.0);
  CHECK(model.parameter(names[0]).abs().max().item<double>() <= bound);
  CHECK(model.parameter(names[0]).abs().max().item<double>() > 0.5 * bound);
  CHECK(model.frozen_state_dict().size() + 2 == model.all_tensors().size() - 8);
}

TEST_CASE("LoRA forward and backward equal an fp64 reference with the adapters merged, for the families and tasks") {
  SUBCASE("BERT, query and value") {
    const EncoderConfig c = shardtrain_test::tiny_bert_config();
    check_against_reference(c, resolve_lora(c, options(3)));
  }
  SUBCASE("BERT, all-linear with the pooler saved, rsLoRA") {
    const EncoderConfig c = shardtrain_test::tiny_bert_config();
    LoraConfig o = options(2, {"all-linear"}, {"pooler"});
    o.use_rslora = true;
    check_against_reference(c, resolve_lora(c, o));
  }
  SUBCASE("DeBERTa-v3: query_proj and key_proj also project the relative embeddings (share_att_key)") {
    const EncoderConfig c = fixture_config("deberta_v3_l2");
    REQUIRE(c.share_att_key);
    check_against_reference(c, resolve_lora(c, options(2, {"query_proj", "key_proj", "value_proj"})));
  }
  SUBCASE("RoBERTa, token classification") {
    EncoderConfig c = fixture_config("roberta_l2");
    c.task = Task::kTokenClassification;
    c.set_num_labels(5);
    check_against_reference(c, resolve_lora(c, options(2)));
  }
  SUBCASE("BERT, question answering: qa_outputs saved") {
    EncoderConfig c = shardtrain_test::tiny_bert_config();
    c.task = Task::kQuestionAnswering;
    c.set_num_labels(2);
    check_against_reference(c, resolve_lora(c, options(2, {"query", "key", "value", "dense"})));
  }
  SUBCASE("ELECTRA, multiple choice, all-linear: the embeddings' projection adapted too") {
    EncoderConfig c = fixture_config("electra_project_l2");
    c.task = Task::kMultipleChoice;
    c.set_num_labels(1);
    const LoraSpec spec = resolve_lora(c, options(2, {"all-linear"}));
    CHECK(target_names(spec).count("electra.embeddings_project") == 1);
    check_against_reference(c, spec);
  }
  SUBCASE("ModernBERT: the fused Wqkv and every other Linear") {
    const EncoderConfig c = fixture_config("modernbert_cls_l4");
    check_against_reference(c, resolve_lora(c, options(2, {"all-linear"})));
  }
}

TEST_CASE("merge_lora gives the logits of the base with its adapter") {
  const EncoderConfig c = shardtrain_test::tiny_bert_config();
  TaskModel model(c);
  model.init_weights(3);
  model.add_lora(resolve_lora(c, options(4, {"all-linear"})), 5);
  randomise_adapters(model, 17);
  model.eval();
  const Inputs in = inputs(c);
  const at::Tensor before = model.forward(in.ids, in.types, in.mask).detach();
  const at::Tensor base_only = [&] {
    TaskModel base(c);
    base.init_weights(3);
    base.eval();
    return base.forward(in.ids, in.types, in.mask).detach();
  }();
  CHECK(!at::allclose(before, base_only, 1e-3, 1e-3));  // the adapters change the logits
  model.merge_lora();
  CHECK(model.lora() == nullptr);
  CHECK(model.frozen_state_dict().empty());
  for (const auto& [name, t] : model.state_dict()) {
    CHECK(name.find(".lora_") == std::string::npos);
    CHECK(t.requires_grad());
  }
  CHECK(model.state_dict().size() == TaskModel(c).state_dict().size());
  CHECK(at::allclose(model.forward(in.ids, in.types, in.mask), before, 1e-5, 1e-6));
}

TEST_CASE("A PEFT adapter folder: PEFT's config fields and key names; read back it gives the same model") {
  const EncoderConfig c = shardtrain_test::tiny_bert_config();
  TaskModel model(c);
  model.init_weights(3);
  model.add_lora(resolve_lora(c, options(4)), 5);
  randomise_adapters(model, 19);
  TempDir dir;
  write_peft_adapter(dir.path, model, "/models/bert-tiny");

  // adapter_config.json: the fixture holds what PEFT's LoraConfig writes for
  // LoraConfig(task_type="SEQ_CLS", r=4, lora_alpha=16) on a BERT.
  const nlohmann::json expected = nlohmann::json::parse(
      read_file(std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/fixtures/peft/bert_seq_cls_adapter_config.json", "fixture"));
  const nlohmann::json written = nlohmann::json::parse(read_file(dir.path + "/adapter_config.json", "config"));
  CHECK(written == expected);

  const SafetensorsFile file(dir.path + "/adapter_model.safetensors");
  std::vector<std::string> keys;
  for (const SafetensorsEntry& e : file.entries()) keys.push_back(e.name + " " + shape_text(e.shape));
  std::ifstream fixture(std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/fixtures/peft/bert_seq_cls_adapter_keys.txt");
  std::vector<std::string> expected_keys;
  for (std::string line; std::getline(fixture, line);)
    if (!line.empty() && line[0] != '#') expected_keys.push_back(line);
  std::sort(keys.begin(), keys.end());
  std::sort(expected_keys.begin(), expected_keys.end());
  CHECK(keys == expected_keys);

  const PeftAdapter read = read_peft_adapter(dir.path, c);
  CHECK(read.base_model_name_or_path == "/models/bert-tiny");
  CHECK(read.spec.r == 4);
  CHECK(target_names(read.spec) == target_names(*model.lora()));
  TaskModel loaded(c);
  loaded.init_weights(3);
  loaded.add_lora(read.spec, 99);
  apply_peft_adapter(loaded, read, dir.path);
  model.eval();
  loaded.eval();
  const Inputs in = inputs(c);
  CHECK(at::equal(loaded.forward(in.ids, in.types, in.mask), model.forward(in.ids, in.types, in.mask)));

  const PeftAdapterHead head = peek_peft_adapter(dir.path);
  CHECK((head.task == Task::kSequenceClassification));
  CHECK((head.num_labels == int64_t{3}));
}

TEST_CASE("Bad adapters are refused by name") {
  const EncoderConfig c = shardtrain_test::tiny_bert_config();
  TaskModel model(c);
  model.init_weights(3);
  model.add_lora(resolve_lora(c, options(4)), 5);
  TempDir dir;
  write_peft_adapter(dir.path, model, "base");
  const std::string config_path = dir.path + "/adapter_config.json";
  const nlohmann::json good = nlohmann::json::parse(read_file(config_path, "config"));
  auto with_config = [&](auto&& edit) {
    nlohmann::json j = good;
    edit(j);
    write_file_atomic(config_path, j.dump());
  };
  auto refused = [&](const std::string& message) {
    CAPTURE(message);
    CHECK_THROWS_WITH_AS(read_peft_adapter(dir.path, c), doctest::Contains(message.c_str()), Error);
  };
  with_config([](nlohmann::json& j) { j["use_dora"] = true; });
  refused("DoRA adapters are not supported");
  with_config([](nlohmann::json& j) { j["bias"] = "all"; });
  refused("only bias = \"none\"");
  with_config([](nlohmann::json& j) { j["peft_type"] = "IA3"; });
  refused("peft_type \"IA3\"");
  with_config([](nlohmann::json& j) { j["target_modules"] = {"query", "value", "key"}; });
  refused("no tensor \"base_model.model.bert.encoder.layer.0.attention.self.key.lora_A.weight\"");
  with_config([](nlohmann::json& j) { j["target_modules"] = {"q_proj"}; });
  refused("\"q_proj\" matches no Linear module");
  with_config([](nlohmann::json& j) { j["r"] = 8; });
  refused("needs [8, 16]");
  with_config([](nlohmann::json& j) { j["target_modules"] = {"query"}; });
  refused("value.lora_A.weight\" has no place");
  with_config([](nlohmann::json& j) { j["lora_bias"] = true; });
  refused("lora_bias = true");
  with_config([](nlohmann::json& j) { j["init_lora_weights"] = "pissa"; });
  refused("init_lora_weights = \"pissa\"");
  with_config([](nlohmann::json& j) { j["exclude_modules"] = {"key"}; });
  refused("exclude_modules is set");
  with_config([](nlohmann::json& j) { j["use_dora"] = nullptr; j["fan_in_fan_out"] = nullptr; });
  CHECK_NOTHROW(read_peft_adapter(dir.path, c));  // null is PEFT's "not set"
  with_config([](nlohmann::json&) {});
  EncoderConfig wider = c;
  wider.set_num_labels(5);
  CHECK_THROWS_WITH_AS(read_peft_adapter(dir.path, wider), doctest::Contains("classifier.weight\" is [3, 16]"), Error);
  std::filesystem::remove(dir.path + "/adapter_model.safetensors");
  refused("no adapter_model.safetensors");
  std::filesystem::remove(config_path);
  refused("no adapter_config.json");
}

TEST_CASE("lora.adapter: [lora] keys that restate the adapter are accepted, others refused naming both") {
  const EncoderConfig c = shardtrain_test::tiny_bert_config();
  TaskModel trained(c);
  trained.init_weights(3);
  trained.add_lora(resolve_lora(c, options(4)), 5);
  TempDir dir;
  write_peft_adapter(dir.path, trained, "base");
  auto attach = [&](LoraConfig lora) {
    TaskModel model(c);
    model.init_weights(3);
    lora.adapter = dir.path;
    attach_lora(model, lora, 1);
  };
  LoraConfig same;
  same.target_modules = {"value", "query"};  // another order: the same targets
  CHECK_NOTHROW(attach(same));
  LoraConfig other;
  other.target_modules = {"query"};
  CHECK_THROWS_WITH_AS(attach(other), doctest::Contains("lora.target_modules = [query] but lora.adapter"), Error);
  LoraConfig saved;
  saved.modules_to_save = {"pooler"};
  CHECK_THROWS_WITH_AS(attach(saved), doctest::Contains("lora.modules_to_save = [pooler]"), Error);
}

TEST_CASE("A parameter the base folder lacks is not left frozen at its random init") {
  const EncoderConfig c = shardtrain_test::tiny_bert_config();
  TaskModel model(c);
  model.init_weights(3);
  model.add_lora(resolve_lora(c, options(4)), 5);
  CHECK_NOTHROW(refuse_frozen_missing_keys(model, {"classifier.weight", "classifier.bias"}, "base", ""));
  CHECK_THROWS_WITH_AS(refuse_frozen_missing_keys(model, {"bert.pooler.dense.weight"}, "base", ""),
                       doctest::Contains("base has no bert.pooler.dense.weight (it would start from a random init), "
                                         "and the LoRA adapter freezes it"),
                       Error);
  CHECK_THROWS_WITH_AS(refuse_frozen_missing_keys(model, {"bert.pooler.dense.weight"}, "base", ""),
                       doctest::Contains("Add \"bert.pooler.dense\" to lora.modules_to_save"), Error);
}

TEST_CASE("Sha256 equals FIPS 180-4's examples") {
  auto digest = [](const std::string& text) {
    Sha256 h;
    h.update(text);
    return h.hex_digest();
  };
  CHECK(digest("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(digest("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(digest("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  Sha256 pieces;  // the same bytes in uneven pieces
  const std::string million(1000000, 'a');
  for (size_t at = 0; at < million.size(); at += 777) pieces.update(million.data() + at, std::min<size_t>(777, million.size() - at));
  CHECK(pieces.hex_digest() == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

}  // namespace lora_test
