// RoBERTa, DistilBERT, ELECTRA, ModernBERT, DeBERTa-v2, EuroBERT and GTE models against an
// independent float64 PyTorch reference of each (tests/fixtures/make_family_golden.py):
// logits, loss and every parameter's gradient, padded and packed; HF folders
// exported and read back; bf16 against fp32.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "shardtrain/core/check.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/model/family_spec.h"
#include "shardtrain/model/hf_folder.h"
#include "shardtrain/model/parameter_plan.h"
#include "shardtrain/model/safetensors.h"
#include "support/scratch_dir.h"

using namespace shardtrain;

namespace families_test {

const std::string kFamilyGolden = std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/fixtures/family_golden/";
const char* const kFixtures[] = {"roberta_l2",        "electra_project_l2",      "distilbert_l2",
                                 "distilbert_sinusoidal_l1", "modernbert_cls_l4", "modernbert_mean_bias_l3",
                                 "deberta_v3_l2",     "deberta_v2_separate_l2",  "deberta_c2p_l1",
                                 "deberta_v3_buckets_l1", "eurobert_late_gqa_l2", "eurobert_mean_bias_l2",
                                 "eurobert_bos_mqa_l1", "eurobert_tokens_l2", "gte_new_ntk_l2",
                                 "gte_new_qkv_regression_l2", "gte_token_l2"};

// Tolerances as in tests/test_bert.cpp (same sizes, same depth): elementwise
// |got - want| <= tol + tol |want| against the fp64 truth rounded to fp32.
constexpr double kLogitTol = 1e-5;
constexpr double kGradTol = 1e-4;

double excess(const at::Tensor& got, const at::Tensor& want, double tol) {
  const at::Tensor g = got.detach().to(at::kDouble), w = want.to(at::kDouble);
  return ((g - w).abs() - (tol + tol * w.abs())).max().item<double>();
}

struct Fixture {
  HfModel hf;
  NamedTensors tensors;
  at::Tensor get(const std::string& name) const {
    for (const auto& [n, t] : tensors)
      if (n == name) return t;
    FAIL("golden tensor missing: " << name);
    return {};
  }
  Batch batch() const {
    Batch b;
    b.input_ids = get("input_ids");
    b.token_type_ids = get("token_type_ids");
    b.attention_mask = get("attention_mask");
    b.labels = get("labels");
    return b;
  }
};

Fixture load_fixture(const std::string& name) {
  Fixture f;
  f.hf = load_hf_folder(kFamilyGolden + name);
  f.tensors = SafetensorsFile(kFamilyGolden + name + "/golden.safetensors").all_tensors();
  return f;
}

// Logits and every gradient against the reference, with the model padded or packed.
void check_against_reference(const std::string& name, bool unpadded) {
  Fixture f = load_fixture(name);
  TaskModel& model = *f.hf.model;
  model.eval();
  model.zero_grad();
  model.set_unpadded(unpadded);
  const at::Tensor logits = model.forward_batch(f.batch());
  const at::Tensor loss = model.loss(logits, f.get("labels"));
  loss.backward();
  std::printf("%s (%s)\n", name.c_str(), unpadded ? "packed" : "padded");
  // Token classification: the real tokens' logits (the packed forward has
  // none at padding, which the loss ignores).
  const at::Tensor keep = logits.dim() == 3 ? f.get("attention_mask").unsqueeze(-1).to(at::kFloat) : at::ones({1});
  const at::Tensor got = logits.detach() * keep, want = f.get("logits") * keep;
  const double logit_excess = excess(got, want, kLogitTol);
  std::printf("  %-6s %-60s max|diff| %.2e\n", logit_excess <= 0 ? "OK" : "NOT OK", "logits",
              (got - want).abs().max().item<double>());
  CHECK(logit_excess <= 0);
  CHECK(excess(loss, f.get("loss"), kLogitTol) <= 0);
  int checked = 0;
  for (const auto& [param_name, param] : model.state_dict()) {
    CAPTURE(param_name);
    const at::Tensor want = f.get("grad." + param_name);
    REQUIRE(param.grad().defined());
    const double e = excess(param.grad(), want, kGradTol);
    if (e > 0) std::printf("  NOT OK grad %-55s max|diff| %.2e\n", param_name.c_str(),
                           (param.grad() - want).abs().max().item<double>());
    CHECK(e <= 0);
    ++checked;
  }
  std::printf("  %d gradients checked\n", checked);
  CHECK(checked == static_cast<int>(f.tensors.size()) - 6);  // every grad.* entry of the reference
}

at::Tensor eval_logits(TaskModel& model, const Batch& batch) {
  at::NoGradGuard no_grad;
  model.eval();
  return model.forward_batch(batch);
}

}  // namespace families_test

using namespace families_test;

TEST_CASE("families: logits, loss and every gradient match the float64 reference, padded") {
  for (const std::string name : kFixtures) {
    CAPTURE(name);
    check_against_reference(name, /*unpadded=*/false);
  }
}

TEST_CASE("families: the unpadded (packed) forward matches the reference too") {
  // The packed batch holds several sequences back to back; ModernBERT's
  // window (2 tokens each side, sequences of 9, 6, 3) must not cross from one
  // sequence into the next, and RoBERTa's positions restart per sequence.
  for (const std::string name : kFixtures) {
    CAPTURE(name);
    check_against_reference(name, /*unpadded=*/true);
  }
}

TEST_CASE("families: names, units and folder contents are HF's") {
  for (const std::string name : kFixtures) {
    CAPTURE(name);
    Fixture f = load_fixture(name);
    CHECK(f.hf.report.missing_keys.empty());
    CHECK(f.hf.report.unexpected_keys.empty());
    // model.safetensors was written in the reference's (HF's) order: the plan
    // has the same names in the same order.
    const NamedTensors file = SafetensorsFile(kFamilyGolden + name + "/model.safetensors").all_tensors();
    const std::vector<ParameterSpec> plan = parameter_plan(f.hf.config);
    REQUIRE(plan.size() == file.size());
    for (size_t i = 0; i < plan.size(); ++i) {
      CHECK(plan[i].name == file[i].first);
      CHECK(at::IntArrayRef(plan[i].shape) == file[i].second.sizes());
    }
    const TaskModel& model = *f.hf.model;
    CHECK(model.num_units() == f.hf.config.num_units());
    CHECK(model.num_units() == f.hf.config.num_hidden_layers + (f.hf.config.has_relative_unit() ? 3 : 2));
    const std::string last = model.state_dict().back().first;
    CHECK(model.unit_of(last) == model.num_units() - 1);
    CHECK(model.unit_of(model.state_dict().front().first) == 0);
    CHECK(f.hf.config.num_parameters() == count_trainable(plan));
  }
  // ELECTRA's projection belongs to the embeddings unit; ModernBERT's final norm to the head.
  CHECK(load_fixture("electra_project_l2").hf.model->unit_of("electra.embeddings_project.weight") == 0);
  CHECK(load_fixture("modernbert_cls_l4").hf.model->unit_of("model.final_norm.weight") == 5);
  // DistilBERT's sinusoidal positions are fixed: not trained, equal to HF's table.
  Fixture d = load_fixture("distilbert_sinusoidal_l1");
  REQUIRE(d.hf.model->fixed_tensors().size() == 1);
  CHECK_THROWS_AS(d.hf.model->unit_of("distilbert.embeddings.position_embeddings.weight"), Error);
  const at::Tensor table = d.hf.model->fixed_tensors()[0].second;
  const NamedTensors file = SafetensorsFile(kFamilyGolden + "distilbert_sinusoidal_l1/model.safetensors").all_tensors();
  for (const auto& [n, t] : file)
    if (n == "distilbert.embeddings.position_embeddings.weight") CHECK(at::equal(t, table));
}

TEST_CASE("families: export writes a folder that loads back to the same logits and config") {
  for (const std::string name : kFixtures) {
    CAPTURE(name);
    Fixture f = load_fixture(name);
    shardtrain_test::ScratchDir out("family_export");
    save_hf_folder(*f.hf.model, out.dir);
    // config.json under the family's own names and architecture.
    std::ifstream config_file(out.dir + "/config.json");
    const nlohmann::json j = nlohmann::json::parse(config_file);
    CHECK(j["model_type"] == f.hf.config.model_type);
    CHECK(j["architectures"][0] == f.hf.config.architecture());
    if (f.hf.config.family == ModelFamily::kDistilBert) {
      CHECK(j.contains("dim"));
      CHECK_FALSE(j.contains("hidden_size"));
    }
    if (f.hf.config.family == ModelFamily::kModernBert) {
      CHECK(j.contains("local_attention"));
      CHECK(j.contains("hidden_activation"));
    }
    HfModel again = load_hf_folder(out.dir);
    CHECK(again.report.missing_keys.empty());
    CHECK(again.report.unexpected_keys.empty());
    CHECK(again.config.to_json() == f.hf.config.to_json());
    CHECK(at::equal(eval_logits(*again.model, f.batch()), eval_logits(*f.hf.model, f.batch())));
  }
}

TEST_CASE("families: a wrong switch is caught by the tolerances") {
  // ModernBERT with every layer global (no window) differs from the reference.
  Fixture f = load_fixture("modernbert_cls_l4");
  EncoderConfig wrong = f.hf.config;
  wrong.global_attn_every_n_layers = 1;
  TaskModel model(wrong);
  load_hf_weights(model, f.hf.model->state_dict());
  CHECK(excess(eval_logits(model, f.batch()), f.get("logits"), kLogitTol) > 0);
  // RoBERTa with BERT's positions (0..L-1) instead of pad + 1 onwards.
  Fixture r = load_fixture("roberta_l2");
  EncoderConfig as_bert = r.hf.config;
  as_bert.family = ModelFamily::kElectra;  // the same parameters under BERT-style positions (and GELU head)
  as_bert.model_type = "electra";
  as_bert.embedding_size = as_bert.hidden_size;
  TaskModel other(as_bert);
  NamedTensors renamed;
  for (const auto& [n, t] : r.hf.model->state_dict())
    renamed.emplace_back(n.rfind("roberta.", 0) == 0 ? "electra." + n.substr(8) : n, t);
  load_hf_weights(other, renamed);
  CHECK(excess(eval_logits(other, r.batch()), r.get("logits"), kLogitTol) > 0);
  // EuroBERT: mean pooling instead of late, and multi-head attention with
  // the key/value heads tiled (j mod Hkv) instead of repeated (j / n).
  Fixture e = load_fixture("eurobert_late_gqa_l2");
  EncoderConfig mean = e.hf.config;
  mean.classifier_pooling = "mean";
  TaskModel mean_model(mean);
  load_hf_weights(mean_model, e.hf.model->state_dict());
  CHECK(excess(eval_logits(mean_model, e.batch()), e.get("logits"), kLogitTol) > 0);
  EncoderConfig mha = e.hf.config;
  mha.num_key_value_heads = 0;
  TaskModel tiled(mha);
  NamedTensors widened;
  for (const auto& [n, t] : e.hf.model->state_dict()) {
    const bool kv = n.find("k_proj") != std::string::npos || n.find("v_proj") != std::string::npos;
    widened.emplace_back(n, kv ? at::cat({t, t}) : t);  // heads 0 1 0 1: tiled
  }
  load_hf_weights(tiled, widened);
  CHECK(excess(eval_logits(tiled, e.batch()), e.get("logits"), kLogitTol) > 0);
  // ... while heads 0 0 1 1 (each repeated for its 2 query heads) are the grouped model itself.
  NamedTensors repeated;
  for (const auto& [n, t] : e.hf.model->state_dict()) {
    const bool kv = n.find("k_proj") != std::string::npos || n.find("v_proj") != std::string::npos;
    repeated.emplace_back(n, kv ? t.view({2, 1, 4, -1}).expand({2, 2, 4, t.size(1)}).reshape({16, -1}) : t);
  }
  TaskModel grouped_as_mha(mha);
  load_hf_weights(grouped_as_mha, repeated);
  CHECK(excess(eval_logits(grouped_as_mha, e.batch()), e.get("logits"), kLogitTol) <= 0);
}

TEST_CASE("families: bf16 follows fp32") {
  // bf16 keeps 8 bits of mantissa (relative step 2^-8 = 3.9e-3); through a few
  // layers with LayerNorm and softmax in fp32, logits of O(1) stay within 5e-2
  // (measured worst below 2e-2); a broken bf16 path (no fp32 norm, a wrong
  // cast) is off by O(1).
  for (const std::string name : kFixtures) {
    CAPTURE(name);
    Fixture f = load_fixture(name);
    // Token classification: the real tokens (padding rows' logits are never read).
    const at::Tensor keep = f.get("logits").dim() == 3 ? f.get("attention_mask").unsqueeze(-1).to(at::kFloat)
                                                       : at::ones({1});
    const at::Tensor fp32 = eval_logits(*f.hf.model, f.batch()) * keep;
    f.hf.model->to(at::kBFloat16);
    for (bool unpadded : {false, true}) {
      f.hf.model->set_unpadded(unpadded);
      const at::Tensor bf16 = eval_logits(*f.hf.model, f.batch()).to(at::kFloat) * keep;
      const double worst = (bf16 - fp32).abs().max().item<double>() / (1.0 + fp32.abs().max().item<double>());
      MESSAGE(name << " bf16 vs fp32 (unpadded " << unpadded << "): worst relative " << worst);
      CHECK(worst < 5e-2);
    }
  }
}

TEST_CASE("families: random init follows HF's _init_weights") {
  Fixture f = load_fixture("modernbert_cls_l4");
  EncoderConfig c = f.hf.config;
  c.vocab_size = 4000;  // enough samples for the statistics below
  TaskModel model(c);
  model.init_weights(5);
  // Truncated normal at +-2 std (initializer_cutoff_factor), std 0.02; the padding row is not zeroed.
  const at::Tensor words = model.parameter("model.embeddings.tok_embeddings.weight");
  CHECK(words.abs().max().item<double>() <= 0.04 + 1e-7);
  CHECK(words[c.pad_token_id].abs().sum().item<double>() > 0);
  // A N(0, 0.02) truncated at 2 std has std 0.02 x 0.8796 (64,000 samples: within 2%).
  CHECK(words.std().item<double>() == doctest::Approx(0.02 * 0.8796).epsilon(0.02));
  // "out" projections: std initializer_range / sqrt(2 num_layers); the classifier hidden_size^-0.5; no biases.
  CHECK(model.parameter("model.layers.1.attn.Wo.weight").abs().max().item<double>() <=
        2 * 0.02 / std::sqrt(8.0) + 1e-7);
  CHECK(model.parameter("classifier.bias").abs().sum().item<double>() == 0.0);
  CHECK(model.parameter("model.final_norm.weight").eq(1.0).all().item<bool>());
  // RoBERTa zeroes the padding row of its word and position embeddings.
  Fixture r = load_fixture("roberta_l2");
  TaskModel roberta(r.hf.config);
  roberta.init_weights(5);
  CHECK(roberta.parameter("roberta.embeddings.word_embeddings.weight")[1].abs().sum().item<double>() == 0.0);
  CHECK(roberta.parameter("roberta.embeddings.position_embeddings.weight")[1].abs().sum().item<double>() == 0.0);
}

TEST_CASE("families: configs refuse what a family cannot be, naming the key") {
  auto fails = [](const std::string& json, const std::string& expected) {
    CAPTURE(json);
    CHECK_THROWS_WITH_AS(EncoderConfig::from_json(json, "x/config.json"), doctest::Contains(expected.c_str()), Error);
  };
  fails(R"({"model_type": "distilbert", "dim": 10, "n_heads": 4})", "\"dim\": 10 is not a multiple of n_heads");
  fails(R"({"model_type": "modernbert", "local_attention": 5})", "\"local_attention\": must be even");
  fails(R"({"model_type": "modernbert", "classifier_pooling": "max"})", "\"classifier_pooling\"");
  fails(R"({"model_type": "modernbert", "hidden_size": 12, "num_attention_heads": 4})", "must be even for rotary");
  fails(R"({"model_type": "roberta", "max_position_embeddings": 2})", "RoBERTa positions start after pad_token_id");
  fails(R"({"model_type": "electra", "embedding_size": 0})", "\"embedding_size\": must be positive");
  fails(R"({"model_type": "distilbert", "activation": "swishy"})", "\"activation\": \"swishy\" is not supported");
  fails(R"({"model_type": "eurobert", "rope_scaling": {"rope_type": "llama3", "factor": 8}})",
        "\"rope_scaling\": rope type \"llama3\" is not supported");
  fails(R"({"model_type": "eurobert", "rope_parameters": {"rope_type": "yarn"}})", "\"rope_parameters\"");
  fails(R"({"model_type": "eurobert", "head_dim": 128})", "\"head_dim\": 128 is not hidden_size / num_attention_heads");
  fails(R"({"model_type": "eurobert", "num_key_value_heads": 5})", "\"num_key_value_heads\": 5 does not divide");
  fails(R"({"model_type": "eurobert", "classifier_pooling": "cls"})", "is not \"bos\", \"mean\" or \"late\"");
  fails(R"({"model_type": "eurobert", "architectures": ["EuroBertForQuestionAnswering"]})",
        "transformers has no EuroBertForQuestionAnswering");
  fails(R"({"model_type": "eurobert", "num_key_value_heads": 0})", "\"num_key_value_heads\": must be > 0");
  fails(R"({"model_type": "eurobert", "clf_pooling": "bos", "classifier_pooling": "mean"})",
        "\"clf_pooling\": \"bos\" contradicts classifier_pooling \"mean\"");
  fails(R"({"model_type": "gte", "pack_qkv": true})", "\"pack_qkv\": belongs to the hub layout");
  fails(R"({"model_type": "gte", "rope_parameters": {"rope_type": "default"}, "rope_scaling": {"type": "ntk", "factor": 2}})",
        "\"rope_scaling\": is given beside rope_parameters");
  // EuroBERT's hub code saved the pooling as clf_pooling: it is the checkpoint's.
  CHECK(EncoderConfig::from_json(R"({"model_type": "eurobert", "clf_pooling": "bos"})").classifier_pooling == "bos");
  // mmBERT's own config.json (tests/fixtures/mmbert): ModernBERT with a
  // 256,000-token vocabulary; its encoder is 196,608,000 embedding and
  // 110,331,648 other parameters (the model card's 307M and 110M).
  {
    const EncoderConfig mmbert =
        EncoderConfig::from_file(std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/fixtures/mmbert/config.json");
    CHECK(mmbert.family == ModelFamily::kModernBert);
    CHECK(mmbert.vocab_size == 256000);
    int64_t embedding = 0, rest = 0;
    for (const ParameterSpec& p : parameter_plan(mmbert)) {
      if (p.unit == mmbert.head_unit() && p.name.rfind("model.", 0) != 0) continue;  // the task head
      int64_t n = 1;
      for (const int64_t d : p.shape) n *= d;
      (p.slot == Slot::kWordEmbeddings ? embedding : rest) += n;
    }
    CHECK(embedding == 196608000);
    CHECK(rest == 110331648);
  }
  // GTE's hub layout without pad_token_id: no padding row (NewConfig has no
  // default), written back as null; with one, the usual padding row.
  {
    const EncoderConfig none = EncoderConfig::from_json(R"({"model_type": "new", "num_attention_heads": 12})");
    CHECK_FALSE(none.word_padding_row);
    CHECK(nlohmann::json::parse(none.to_json())["pad_token_id"].is_null());
    for (const ParameterSpec& p : parameter_plan(none))
      if (p.slot == Slot::kWordEmbeddings) CHECK(p.padding_row == -1);
    CHECK_FALSE(EncoderConfig::from_json(none.to_json()).word_padding_row);
    const EncoderConfig with = EncoderConfig::from_json(R"({"model_type": "new", "pad_token_id": 0})");
    CHECK(with.word_padding_row);
    CHECK(nlohmann::json::parse(with.to_json())["pad_token_id"] == 0);
  }
  // GTE: what is not implemented is refused by name; keys that do not change the math are kept.
  fails(R"({"model_type": "new", "logn_attention_scale": true})", "\"logn_attention_scale\": is true");
  fails(R"({"model_type": "new", "layer_norm_type": "rms_norm"})", "\"layer_norm_type\": \"rms_norm\"");
  fails(R"({"model_type": "new", "position_embedding_type": "absolute"})", "\"position_embedding_type\"");
  fails(R"({"model_type": "new", "rope_scaling": {"type": "dynamic", "factor": 2}})",
        "\"rope_scaling\": type \"dynamic\"");
  fails(R"({"model_type": "new", "rope_scaling": {"type": "ntk", "factor": 2, "mixed_b": 0.5}})", "mixed_b");
  fails(R"({"model_type": "new", "rope_scaling": {"type": "ntk", "factor": 0.5}})", "factor must be >= 1");
  fails(R"({"model_type": "gte", "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000}})",
        "\"rope_parameters\": rope_type \"yarn\"");
  fails(R"({"model_type": "gte", "hidden_size": 12, "num_attention_heads": 4})", "must be even for rotary");
  const EncoderConfig gte_new = EncoderConfig::from_json(
      R"({"model_type": "new", "unpad_inputs": true, "use_memory_efficient_attention": true, "type_vocab_size": 0})");
  CHECK_FALSE(gte_new.has_token_types());
  CHECK(nlohmann::json::parse(gte_new.to_json())["unpad_inputs"] == true);
  CHECK(gte_new.base_prefix() == "new.");
  // transformers' GteConfig converts the hub's NTK scaling to a linear one with a larger base.
  const EncoderConfig gte_legacy = EncoderConfig::from_json(
      R"({"model_type": "gte", "hidden_size": 32, "num_attention_heads": 2, "rope_theta": 100,
          "rope_scaling": {"type": "ntk", "factor": 4}})");
  CHECK(gte_legacy.rope_scaling_type == "linear");
  CHECK(gte_legacy.rope_theta == doctest::Approx(400.0));
  CHECK(gte_legacy.rope_scaling_factor == doctest::Approx(std::pow(4.0, 2.0 / 16.0)));
  CHECK(gte_legacy.base_prefix() == "gte.");
  // Accepted names of the RoBERTa architecture.
  CHECK(EncoderConfig::from_json(R"({"model_type": "xlm-roberta"})").family == ModelFamily::kRoberta);
  CHECK(EncoderConfig::from_json(R"({"model_type": "xlm-roberta"})").architecture() ==
        "XLMRobertaForSequenceClassification");
  CHECK(EncoderConfig::from_json(R"({"model_type": "camembert"})").vocab_size == 32005);
  // RoBERTa takes 512 tokens from its 514 positions.
  CHECK(EncoderConfig::from_file(std::string(SHARDTRAIN_SOURCE_DIR) + "/data/vocab/roberta-base/config.json")
            .max_sequence_length() == 512);
  CHECK(EncoderConfig::from_file(std::string(SHARDTRAIN_SOURCE_DIR) + "/data/vocab/roberta-base/config.json")
            .num_parameters() == 124647170);
}

TEST_CASE("families: the spec table (model/family_spec.h) is whole and agrees with the plans") {
  for (const FamilySpec* spec : all_families()) {
    CAPTURE(spec->name);
    REQUIRE(&family_spec(spec->family) == spec);
    CHECK(family_name(spec->family) == std::string(spec->name));
    REQUIRE_FALSE(spec->model_types.empty());
    for (const ModelType& type : spec->model_types) {
      CAPTURE(type.name);
      CHECK(family_of_model_type(type.name) == spec);  // no model_type read by two families
      // A config.json of that model_type reads back as the family, and its
      // class is the type's own prefix.
      const EncoderConfig config =
          EncoderConfig::from_json(std::string(R"({"model_type": ")") + type.name + R"("})");
      CHECK(config.family == spec->family);
      CHECK(config.architecture() == std::string(type.class_prefix) + "ForSequenceClassification");
      // PEFT's default LoRA targets name Linear layers of every encoder layer
      // (the last dotted part of a weight's module), as PEFT matches them.
      const std::vector<ParameterSpec> plan = parameter_plan(config);
      for (const std::string& target : type.lora_target_modules) {
        CAPTURE(target);
        int64_t matches = 0;
        for (const ParameterSpec& p : plan)
          if (p.shape.size() == 2 && p.name.size() > target.size() + 7 &&
              p.name.compare(p.name.size() - target.size() - 7, std::string::npos, target + ".weight") == 0 &&
              p.name[p.name.size() - target.size() - 8] == '.')
            ++matches;
        CHECK(matches == config.num_hidden_layers);
      }
    }
    // The bare model's modules are where the plan's encoder tensors live (under
    // each model_type's prefix: GTE's layouts have their own).
    for (const ModelType& type : spec->model_types) {
      const EncoderConfig config = EncoderConfig::from_json(std::string(R"({"model_type": ")") + type.name + R"("})");
      for (const ParameterSpec& p : parameter_plan(config)) {
        if (p.unit == config.head_unit() && p.name.rfind(config.base_prefix(), 0) != 0) continue;  // the task head
        REQUIRE(p.name.rfind(config.base_prefix(), 0) == 0);
        const std::string rest = p.name.substr(config.base_prefix().size());
        bool found = false;
        for (const std::string& module : spec->base_modules) found = found || rest.rfind(module, 0) == 0;
        CHECK_MESSAGE(found, p.name);
      }
    }
  }
  // Keys are named as the family's config.json spells them.
  CHECK(std::string(family_spec(ModelFamily::kDistilBert).key("hidden_size")) == "dim");
  CHECK(std::string(family_spec(ModelFamily::kBert).key("hidden_size")) == "hidden_size");
  CHECK(family_of_model_type("gpt2") == nullptr);
}
