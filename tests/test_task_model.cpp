// Token-classification and multiple-choice heads (BERT and RoBERTa ...For
// TokenClassification / ...ForMultipleChoice) against an independent float64
// reference (tests/fixtures/make_task_golden.py): logits and loss, padded and
// packed; HF's names and order; an HF folder written and read back; a
// sequence classifier's folder starting a token classifier.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <string>

#include "shardtrain/data/collator.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/model/hf_folder.h"
#include "shardtrain/model/parameter_plan.h"
#include "shardtrain/model/safetensors.h"
#include "support/golden_tensors.h"
#include "support/scratch_dir.h"

using namespace shardtrain;
using shardtrain_test::golden_excess;
using shardtrain_test::golden_tensor;

namespace task_model_test {

const std::string kTaskGolden = std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/fixtures/task_golden/";
const char* const kTaskFixtures[] = {"bert_token_l2", "roberta_token_l2", "bert_choice_l2", "roberta_choice_l2"};

// As tests/test_model_families.cpp (same sizes and depth): elementwise
// |got - want| <= tol + tol |want| against the fp64 truth rounded to fp32.
constexpr double kTaskLogitTol = 1e-5;

Batch task_batch(const NamedTensors& golden, const EncoderConfig& config) {
  Batch batch;
  batch.input_ids = golden_tensor(golden, "input_ids");
  batch.token_type_ids = golden_tensor(golden, "token_type_ids");
  batch.attention_mask = golden_tensor(golden, "attention_mask");
  batch.labels = golden_tensor(golden, "labels");
  if (config.task == Task::kMultipleChoice) batch.num_choices = 3;
  return batch;
}

// Token logits at the padding are not the model's to match (packed: zeros;
// padded: whatever the padded positions compute): compared at real tokens.
at::Tensor real_tokens_only(const at::Tensor& logits, const Batch& batch) {
  return logits.masked_fill(batch.attention_mask.eq(0).unsqueeze(-1), 0.0);
}

void check_task_fixture(const std::string& name, bool unpadded) {
  CAPTURE(name);
  CAPTURE(unpadded);
  HfModel hf = load_hf_folder(kTaskGolden + name);
  CHECK_MESSAGE(hf.report.missing_keys.empty(), hf.report.message());
  CHECK_MESSAGE(hf.report.unexpected_keys.empty(), hf.report.message());
  const NamedTensors golden = SafetensorsFile(kTaskGolden + name + "/golden.safetensors").all_tensors();
  TaskModel& model = *hf.model;
  model.eval();
  model.set_unpadded(unpadded);
  const Batch batch = task_batch(golden, hf.config);
  at::Tensor logits = model.forward_batch(batch);
  const at::Tensor want = golden_tensor(golden, "logits");
  REQUIRE(logits.sizes() == want.sizes());
  if (hf.config.task == Task::kTokenClassification) logits = real_tokens_only(logits, batch);
  CHECK(golden_excess(logits, want, kTaskLogitTol) <= 0);
  const at::Tensor loss = model.loss(logits, batch.labels);
  CHECK(golden_excess(loss.reshape({1}), golden_tensor(golden, "loss"), kTaskLogitTol) <= 0);
  loss.backward();
  for (const auto& [param_name, param] : model.state_dict()) {
    CAPTURE(param_name);
    REQUIRE(param.grad().defined());
    CHECK(param.grad().isfinite().all().item<bool>());
  }
}

at::Tensor eval_task_logits(TaskModel& model, const Batch& batch) {
  at::NoGradGuard no_grad;
  model.eval();
  return model.forward_batch(batch);
}

}  // namespace task_model_test

using namespace task_model_test;

TEST_CASE("task heads: token and choice logits and the loss match the float64 reference, padded and packed") {
  for (const char* name : kTaskFixtures)
    for (bool unpadded : {false, true}) check_task_fixture(name, unpadded);
}

TEST_CASE("task heads: HF's classes, names and order") {
  const std::pair<const char*, const char*> expected[] = {{"bert_token_l2", "BertForTokenClassification"},
                                                          {"roberta_token_l2", "RobertaForTokenClassification"},
                                                          {"bert_choice_l2", "BertForMultipleChoice"},
                                                          {"roberta_choice_l2", "RobertaForMultipleChoice"}};
  for (const auto& [name, architecture] : expected) {
    CAPTURE(name);
    const HfModel hf = load_hf_folder(kTaskGolden + name);
    CHECK(hf.config.architecture() == architecture);
    // model.safetensors is in the reference's (HF's) order: the plan has the
    // same names, shapes and order.
    const NamedTensors file = SafetensorsFile(kTaskGolden + name + "/model.safetensors").all_tensors();
    const std::vector<ParameterSpec> plan = parameter_plan(hf.config);
    REQUIRE(plan.size() == file.size());
    for (size_t i = 0; i < plan.size(); ++i) {
      CHECK(plan[i].name == file[i].first);
      CHECK(at::IntArrayRef(plan[i].shape) == file[i].second.sizes());
    }
  }
  const std::pair<ModelFamily, const char*> families[] = {
      {ModelFamily::kBert, "Bert"},         {ModelFamily::kRoberta, "Roberta"},
      {ModelFamily::kDistilBert, "DistilBert"}, {ModelFamily::kElectra, "Electra"},
      {ModelFamily::kModernBert, "ModernBert"}, {ModelFamily::kDebertaV2, "DebertaV2"}};
  for (const auto& [family, prefix] : families) {
    EncoderConfig c;
    c.family = family;
    c.task = Task::kTokenClassification;
    CHECK(c.architecture() == std::string(prefix) + "ForTokenClassification");
    c.task = Task::kMultipleChoice;
    CHECK(c.architecture() == std::string(prefix) + "ForMultipleChoice");
    CHECK(c.head_outputs() == 1);
  }
}

TEST_CASE("task heads: a folder written and read back gives the same logits, classes and labels") {
  shardtrain_test::ScratchDir scratch("task_model");
  for (const char* name : kTaskFixtures) {
    CAPTURE(name);
    HfModel hf = load_hf_folder(kTaskGolden + name);
    const NamedTensors golden = SafetensorsFile(kTaskGolden + name + "/golden.safetensors").all_tensors();
    const Batch batch = task_batch(golden, hf.config);
    const std::string folder = scratch.dir + "/" + name;
    save_hf_folder(*hf.model, folder);
    HfModel back = load_hf_folder(folder);
    CHECK(back.config.architecture() == hf.config.architecture());
    CHECK(back.config.id2label == hf.config.id2label);
    CHECK(back.report.missing_keys.empty());
    CHECK(back.report.unexpected_keys.empty());
    CHECK(at::equal(eval_task_logits(*back.model, batch), eval_task_logits(*hf.model, batch)));
  }
}

TEST_CASE("task heads: a sequence classifier's folder starts a token classifier with a new head, said in the report") {
  const std::string folder = std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/fixtures/family_golden/roberta_l2";
  const HfModel sequence = load_hf_folder(folder);
  REQUIRE(sequence.config.task == Task::kSequenceClassification);
  HfLoadOptions options;
  options.task = Task::kTokenClassification;
  options.num_labels = 5;
  const HfModel token = load_hf_folder(folder, options);
  CHECK(token.config.task == Task::kTokenClassification);
  CHECK(token.config.num_labels == 5);
  CHECK(token.report.replaced_head == "RobertaForSequenceClassification");
  // The old head's tensors are not the new model's: not unexpected, not loaded.
  CHECK(token.report.unexpected_keys.empty());
  CHECK(token.report.missing_keys == std::vector<std::string>{"classifier.weight", "classifier.bias"});
  const std::string message = token.report.message();
  CAPTURE(message);
  CHECK(message.find("holds a RobertaForSequenceClassification head") != std::string::npos);
  CHECK(message.find("new RobertaForTokenClassification head") != std::string::npos);
  // The encoder is the folder's; the new classifier is HF's init (normal,
  // std initializer_range; bias 0).
  for (const auto& [name, tensor] : token.model->state_dict()) {
    CAPTURE(name);
    if (name.rfind("roberta.", 0) == 0) CHECK(at::equal(tensor, sequence.model->parameter(name)));
  }
  CHECK(at::equal(token.model->parameter("classifier.bias"), at::zeros({5})));
  const at::Tensor weight = token.model->parameter("classifier.weight");
  CHECK(weight.sizes() == at::IntArrayRef({5, 16}));
  CHECK(weight.std().item<double>() < 3 * token.config.initializer_range);
  CHECK(weight.abs().max().item<double>() > 0);
}
