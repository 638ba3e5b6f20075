// DeBERTa-v2 / v3 beyond the fp64 goldens of tests/test_model_families.cpp
// (docs/DESIGN.md, "DeBERTa-v2"): the CPU kernel of the disentangled
// attention against the ATen ops other devices run (probabilities kept or
// recomputed in backward, attention dropout on, padded and packed, bf16);
// activation checkpointing with the shared relative embeddings; the units
// the strategies see; scores that would overflow if scaled after their
// matmul; the config keys, deberta-v3-base's size, and what is refused.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shardtrain/core/check.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/model/hf_folder.h"
#include "shardtrain/model/parameter_plan.h"
#include "support/padded_rows.h"

using namespace shardtrain;

namespace deberta_test {
namespace {

const std::string kDebertaGolden = std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/fixtures/family_golden/";

// fp32: the kernel and the ATen ops compute the same products in another
// grouping (one matrix at a time, q scaled per matrix): a few ulps per op,
// ~1e-6 after two layers; a wrong gather index or a missing term moves
// values by >= 1e-3.
constexpr double kDebertaFp32Tol = 1e-5;
// bf16 (8-bit mantissa): the kernel sums the position projections' gradients
// over the batch in fp32, the ATen ops in bf16; 3e-2 covers that, an error is O(1).
constexpr double kDebertaBf16Tol = 3e-2;

// A fixture's config with room for rows of 64 tokens (log buckets beyond
// position_buckets / 2 for deberta_v3_l2), dropout as in training.
EncoderConfig deberta_fixture_config(const std::string& name) {
  EncoderConfig c = EncoderConfig::from_file(kDebertaGolden + name + "/config.json");
  c.max_position_embeddings = 128;
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0.1;
  return c;
}

using DebertaStep = shardtrain_test::StepOutputs;

// HF's init (std 0.02) leaves attention almost uniform, whatever its scores:
// weights 15x larger make the scores, and so the position terms, matter.
void deberta_sharpen(TaskModel& model) {
  at::NoGradGuard no_grad;
  for (const at::Tensor& p : model.parameters())
    if (p.dim() == 2) p.mul_(15);
}

at::Tensor deberta_eval_logits(TaskModel& model, const Batch& batch) {
  at::NoGradGuard no_grad;
  model.eval();
  return model.forward_batch(batch);
}

}  // namespace
}  // namespace deberta_test

using namespace deberta_test;

TEST_CASE("deberta: the CPU kernel equals the ATen ops, probabilities kept or recomputed, dropout on") {
  for (const std::string name : {"deberta_v3_l2", "deberta_v2_separate_l2", "deberta_c2p_l1"}) {
    const EncoderConfig config = deberta_fixture_config(name);
    TaskModel model(config);
    model.init_weights(5);
    deberta_sharpen(model);
    model.train();
    const Batch batch = shardtrain_test::padded_rows(config, {37, 5, 64, 20}, 9);
    for (bool unpadded : {false, true}) {
      CAPTURE(name);
      CAPTURE(unpadded);
      model.set_unpadded(unpadded);
      model.set_disentangled_attention_kernel(false);
      const DebertaStep ops = shardtrain_test::training_step(model, batch);
      model.set_disentangled_attention_kernel(true);
      model.set_attention_block_threshold(-1);  // the default: keep the probabilities
      const DebertaStep kept = shardtrain_test::training_step(model, batch);
      model.set_attention_block_threshold(0);  // recompute every matrix in backward
      const DebertaStep recomputed = shardtrain_test::training_step(model, batch);
      model.set_attention_block_threshold(-1);
      CHECK(shardtrain_test::excess_over(kept, ops, kDebertaFp32Tol) <= 0);
      CHECK(shardtrain_test::excess_over(recomputed, ops, kDebertaFp32Tol) <= 0);
      // The attention dropout mask matters: without it the step is far from it.
      model.eval();
      const DebertaStep no_dropout = shardtrain_test::training_step(model, batch);
      model.train();
      CHECK(shardtrain_test::largest_difference(no_dropout, kept) > 1e-3);
    }
  }
}

TEST_CASE("deberta: bf16 activations, kernel against ATen ops") {
  EncoderConfig config = deberta_fixture_config("deberta_v3_l2");
  config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0;
  TaskModel model(config);
  model.init_weights(6);
  deberta_sharpen(model);
  model.to(at::kBFloat16);
  model.train();
  const Batch batch = shardtrain_test::padded_rows(config, {50, 12, 33}, 2);
  model.set_disentangled_attention_kernel(false);
  const DebertaStep ops = shardtrain_test::training_step(model, batch);
  model.set_disentangled_attention_kernel(true);
  for (int64_t threshold : {int64_t{-1}, int64_t{0}}) {
    CAPTURE(threshold);
    model.set_attention_block_threshold(threshold);
    CHECK(shardtrain_test::excess_over(shardtrain_test::training_step(model, batch), ops, kDebertaBf16Tol) <= 0);
  }
}

TEST_CASE("deberta: activation checkpointing gives the plain run's gradients, the shared embeddings' included") {
  const EncoderConfig config = deberta_fixture_config("deberta_v3_l2");
  TaskModel model(config);
  model.init_weights(8);
  deberta_sharpen(model);
  model.train();
  const Batch batch = shardtrain_test::padded_rows(config, {30, 7, 19}, 3);
  for (bool unpadded : {false, true}) {
    CAPTURE(unpadded);
    model.set_unpadded(unpadded);
    model.set_gradient_checkpointing(false);
    const DebertaStep plain = shardtrain_test::training_step(model, batch);
    model.set_gradient_checkpointing(true);
    const DebertaStep checkpointed = shardtrain_test::training_step(model, batch);
    model.set_gradient_checkpointing(false);
    // The recomputation replays the same ops and dropout masks: bit for bit.
    CHECK(shardtrain_test::largest_difference(checkpointed, plain) == 0.0);
    // rel_embeddings get their gradient only through the layers' recomputation.
    const std::vector<std::pair<std::string, at::Tensor>> named = model.state_dict();
    for (size_t i = 0; i < named.size(); ++i)
      if (named[i].first == "deberta.encoder.rel_embeddings.weight")
        CHECK(checkpointed.grads[i].abs().max().item<double>() > 0);
  }
}

TEST_CASE("deberta: the relative embeddings are a unit of their own, between the embeddings and layer 0") {
  const HfModel hf = load_hf_folder(kDebertaGolden + "deberta_v3_l2");
  const TaskModel& model = *hf.model;
  CHECK(model.num_units() == 2 + 3);  // embeddings, relative embeddings, 2 layers, head
  CHECK(model.unit_of("deberta.embeddings.LayerNorm.bias") == 0);
  CHECK(model.unit_of("deberta.encoder.rel_embeddings.weight") == 1);
  CHECK(model.unit_of("deberta.encoder.LayerNorm.weight") == 1);
  CHECK(model.unit_of("deberta.encoder.layer.0.attention.self.query_proj.weight") == 2);
  CHECK(model.unit_of("deberta.encoder.layer.1.output.LayerNorm.bias") == 3);
  CHECK(model.unit_of("pooler.dense.weight") == 4);
  CHECK(model.unit_of("classifier.bias") == 4);
  CHECK(model.unit_parameters(1).size() == 3);
  // Without relative attention there is no such unit.
  EncoderConfig plain = hf.config;
  plain.relative_attention = false;
  plain.norm_rel_ebd = "none";
  CHECK(plain.num_units() == plain.num_hidden_layers + 2);
  CHECK(TaskModel(plain).unit_of("deberta.encoder.layer.0.attention.self.query_proj.weight") == 1);
}

TEST_CASE("deberta: scores that overflow when scaled after their matmul stay finite") {
  // The fp16 overflow transformers fixed, in fp32 (LibTorch's CPU has no fp16
  // matmul): q and k constant at a with q . k = Dh a^2 = 8e38, above fp32's
  // 3.4e38, while q / s . k = 8e38 / sqrt(Dh x 3) = 1.6e38 is not. A kernel
  // that divided after the product would give inf scores and NaN logits. The
  // position terms (separate projections of O(1) weights) stay near 1e20.
  const HfModel hf = load_hf_folder(kDebertaGolden + "deberta_v2_separate_l2");
  TaskModel& model = *hf.model;
  const int64_t Dh = hf.config.head_dim();
  const double a = std::sqrt(8e38 / static_cast<double>(Dh));
  {
    at::NoGradGuard no_grad;
    for (const char* which : {"query_proj", "key_proj"}) {
      const std::string base = std::string("deberta.encoder.layer.0.attention.self.") + which;
      model.parameter(base + ".weight").zero_();
      model.parameter(base + ".bias").fill_(a);
    }
  }
  Batch batch = shardtrain_test::padded_rows(hf.config, {9, 6, 3}, 1);
  for (bool kernel : {true, false}) {
    for (bool unpadded : {false, true}) {
      CAPTURE(kernel);
      CAPTURE(unpadded);
      model.set_disentangled_attention_kernel(kernel);
      model.set_unpadded(unpadded);
      CHECK(at::isfinite(deberta_eval_logits(model, batch)).all().item<bool>());
    }
  }
}

TEST_CASE("deberta: a wrong switch is caught by the golden tolerances") {
  // v3's buckets with max_relative_positions 256 instead of 512: the same
  // parameters, other log buckets for distances beyond 128.
  const HfModel buckets = load_hf_folder(kDebertaGolden + "deberta_v3_buckets_l1");
  EncoderConfig wrong = buckets.config;
  wrong.max_relative_positions = 256;
  TaskModel other(wrong);
  load_hf_weights(other, buckets.model->state_dict());
  const NamedTensors golden = SafetensorsFile(kDebertaGolden + "deberta_v3_buckets_l1/golden.safetensors").all_tensors();
  auto get = [&](const NamedTensors& tensors, const std::string& name) {
    for (const auto& [n, t] : tensors)
      if (n == name) return t;
    return at::Tensor();
  };
  Batch b;
  b.input_ids = get(golden, "input_ids");
  b.token_type_ids = get(golden, "token_type_ids");
  b.attention_mask = get(golden, "attention_mask");
  const at::Tensor want = get(golden, "logits");
  CHECK((deberta_eval_logits(*buckets.model, b) - want).abs().max().item<double>() < 1e-5);
  CHECK((deberta_eval_logits(other, b) - want).abs().max().item<double>() > 1e-4);
  // One term instead of two (scale sqrt(2 Dh), no p2c): the shared projections load the same.
  const HfModel v3 = load_hf_folder(kDebertaGolden + "deberta_v3_l2");
  EncoderConfig c2p_only = v3.config;
  c2p_only.pos_att_type = {"c2p"};
  TaskModel fewer(c2p_only);
  load_hf_weights(fewer, v3.model->state_dict());
  const NamedTensors golden_v3 = SafetensorsFile(kDebertaGolden + "deberta_v3_l2/golden.safetensors").all_tensors();
  Batch b3;
  b3.input_ids = get(golden_v3, "input_ids");
  b3.token_type_ids = get(golden_v3, "token_type_ids");
  b3.attention_mask = get(golden_v3, "attention_mask");
  CHECK((deberta_eval_logits(fewer, b3) - get(golden_v3, "logits")).abs().max().item<double>() > 1e-4);
}

TEST_CASE("deberta: config keys, deberta-v3-base's size, and what is refused") {
  // microsoft/deberta-v3-base's config.json (its older "p2c|c2p" string form).
  const EncoderConfig base =
      EncoderConfig::from_file(std::string(SHARDTRAIN_SOURCE_DIR) + "/configs/models/deberta_v3_base.json");
  CHECK(base.family == ModelFamily::kDebertaV2);
  CHECK(base.pos_att_type == std::vector<std::string>{"p2c", "c2p"});
  CHECK(base.relative_span() == 256);
  CHECK(base.layer_norm_eps == 1e-7);
  CHECK_FALSE(base.has_token_types());
  // DebertaV2ForSequenceClassification of deberta-v3-base with 2 labels:
  // 128,100 x 768 word embeddings, 512 relative rows, 12 layers, pooler, classifier.
  CHECK(base.num_parameters() == 184423682);
  const std::vector<ParameterSpec> plan = parameter_plan(base);
  CHECK(plan.front().name == "deberta.embeddings.word_embeddings.weight");
  CHECK(plan.front().shape == std::vector<int64_t>{128100, 768});
  CHECK(plan.front().padding_row == 0);
  // Written back under DeBERTa's names, and read back the same.
  EncoderConfig with_dropout = base;
  with_dropout.classifier_dropout = 0.2;
  const nlohmann::json j = nlohmann::json::parse(with_dropout.to_json());
  CHECK(j["architectures"][0] == "DebertaV2ForSequenceClassification");
  CHECK(j["cls_dropout"] == 0.2);
  CHECK(j["pooler_hidden_size"] == 768);
  CHECK(j["position_buckets"] == 256);
  CHECK_FALSE(j.contains("position_embedding_type"));
  CHECK(EncoderConfig::from_json(with_dropout.to_json()).to_json() == with_dropout.to_json());
  // HF's defaults when keys are missing: deberta-v2-xlarge's shape, absolute
  // positions, no relative attention.
  const EncoderConfig bare = EncoderConfig::from_json(R"({"model_type": "deberta-v2"})");
  CHECK(bare.vocab_size == 128100);
  CHECK(bare.hidden_size == 1536);
  CHECK(bare.position_biased_input);
  CHECK_FALSE(bare.relative_attention);
  CHECK(bare.num_units() == bare.num_hidden_layers + 2);

  auto fails = [](const std::string& json, const std::string& expected) {
    CAPTURE(json);
    CHECK_THROWS_WITH_AS(EncoderConfig::from_json(json, "x/config.json"), doctest::Contains(expected.c_str()), Error);
  };
  const std::string v3 = R"("model_type": "deberta-v2", "relative_attention": true, "position_buckets": 256, )";
  fails("{" + v3 + R"("pos_att_type": ["c2p", "p2p"]})", "\"pos_att_type\": holds \"p2p\"");
  fails("{" + v3 + R"("pos_att_type": []})", "\"pos_att_type\": is empty but relative_attention is true");
  fails("{" + v3 + R"("pos_att_type": 3})", "\"pos_att_type\": must be a list");
  fails("{" + v3 + R"("pos_att_type": ["c2p"], "conv_kernel_size": 3})", "\"conv_kernel_size\"");
  fails("{" + v3 + R"("pos_att_type": ["c2p"], "embedding_size": 128})", "\"embedding_size\"");
  fails("{" + v3 + R"("pos_att_type": ["c2p"], "pooler_hidden_size": 100})", "\"pooler_hidden_size\": must equal hidden_size");
  fails("{" + v3 + R"("pos_att_type": ["c2p"], "max_position_embeddings": 100})",
        "\"position_buckets\": 256 needs max_relative_positions");
  fails("{" + v3 + R"("pos_att_type": ["c2p"], "pooler_hidden_act": "swishy"})", "\"pooler_hidden_act\"");
  fails(R"({"model_type": "deberta-v2", "norm_rel_ebd": "layer_norm"})", "\"norm_rel_ebd\"");
  fails(R"({"model_type": "deberta-v2", "type_vocab_size": -1})", "\"type_vocab_size\"");
}

// make_log_bucket_position keeps distances below mid = position_buckets // 2
// and divides by mid: position_buckets 1 (mid 0) passed the config checks and
// then failed at the first step with libtorch's index error. It is refused
// when config.json is read; 2 and 3 (mid 1: buckets -1, 0, 1) train.
TEST_CASE("deberta: position_buckets 1 is refused naming the key; 2 and 3 are the smallest that train") {
  std::ifstream file(kDebertaGolden + "deberta_v3_l2/config.json");
  nlohmann::json j = nlohmann::json::parse(file);
  for (int64_t buckets : {1, 0, -2}) {
    j["position_buckets"] = buckets;
    CHECK_THROWS_WITH_AS(EncoderConfig::from_json(j.dump(), "x/config.json"),
                         doctest::Contains("\"position_buckets\": must be -1 (no buckets) or at least 2"), Error);
  }
  for (int64_t buckets : {2, 3}) {
    CAPTURE(buckets);
    j["position_buckets"] = buckets;
    j["max_position_embeddings"] = 128;  // rows of 64 tokens
    const EncoderConfig config = EncoderConfig::from_json(j.dump(), "x/config.json");
    CHECK(config.relative_span() == buckets);
    TaskModel model(config);
    model.init_weights(7);
    deberta_sharpen(model);
    model.train();
    const Batch batch = shardtrain_test::padded_rows(config, {37, 5, 64}, 4);
    model.set_disentangled_attention_kernel(false);
    const DebertaStep ops = shardtrain_test::training_step(model, batch);
    model.set_disentangled_attention_kernel(true);
    const DebertaStep kernel = shardtrain_test::training_step(model, batch);
    CHECK(at::isfinite(kernel.logits).all().item<bool>());
    CHECK(shardtrain_test::excess_over(kernel, ops, kDebertaFp32Tol) <= 0);
  }
}

TEST_CASE("deberta: without relative attention it is BERT with DeBERTa's names (content-only kernel)") {
  // relative_attention false and no position terms: the scale is sqrt(Dh), the
  // embeddings words + positions + types, and a tanh ContextPooler is BERT's
  // pooler: BertForSequenceClassification on the same weights, renamed.
  EncoderConfig deberta = EncoderConfig::from_json(
      R"({"model_type": "deberta-v2", "vocab_size": 50, "hidden_size": 16, "num_hidden_layers": 2,
          "num_attention_heads": 4, "intermediate_size": 24, "max_position_embeddings": 32, "type_vocab_size": 2,
          "layer_norm_eps": 1e-12, "pooler_hidden_act": "tanh", "hidden_dropout_prob": 0,
          "attention_probs_dropout_prob": 0})");
  EncoderConfig bert = EncoderConfig::from_json(
      R"({"model_type": "bert", "vocab_size": 50, "hidden_size": 16, "num_hidden_layers": 2,
          "num_attention_heads": 4, "intermediate_size": 24, "max_position_embeddings": 32,
          "hidden_dropout_prob": 0, "attention_probs_dropout_prob": 0})");
  TaskModel d(deberta), b(bert);
  d.init_weights(3);
  deberta_sharpen(d);
  NamedTensors renamed;
  for (const auto& [name, tensor] : d.state_dict()) {
    std::string n = name == "pooler.dense.weight" || name == "pooler.dense.bias" ? "bert." + name : name;
    if (n.rfind("deberta.", 0) == 0) n = "bert." + n.substr(8);
    for (const char* proj : {"query", "key", "value"}) {
      const std::string from = std::string(proj) + "_proj.", to = std::string(proj) + ".";
      const size_t at = n.find(from);
      if (at != std::string::npos) n.replace(at, from.size(), to);
    }
    renamed.emplace_back(n, tensor);
  }
  const HfLoadReport report = load_hf_weights(b, renamed);
  CHECK(report.missing_keys.empty());
  CHECK(report.unexpected_keys.empty());
  Batch batch = shardtrain_test::padded_rows(deberta, {11, 4, 8}, 5);
  batch.token_type_ids = (at::arange(11, at::kLong).unsqueeze(0) >= 3).to(at::kLong).expand({3, 11}).contiguous() *
                         batch.attention_mask;
  for (bool unpadded : {false, true}) {
    CAPTURE(unpadded);
    d.set_unpadded(unpadded);
    b.set_unpadded(unpadded);
    CHECK((deberta_eval_logits(d, batch) - deberta_eval_logits(b, batch)).abs().max().item<double>() < 1e-5);
  }
}
