// Question-answering heads (RobertaForQuestionAnswering,
// DistilBertForQuestionAnswering) against an independent float64 reference
// (tests/fixtures/make_qa_golden.py): start and end logits and the loss,
// padded and packed, and HF's names.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <string>

#include "shardtrain/data/collator.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/model/hf_folder.h"
#include "shardtrain/model/safetensors.h"

using namespace shardtrain;

namespace qa_model_test {

const std::string kQaGolden = std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/fixtures/qa_golden/";

// As tests/test_model_families.cpp (same sizes and depth): elementwise
// |got - want| <= tol + tol |want| against the fp64 truth rounded to fp32.
constexpr double kQaLogitTol = 1e-5;

at::Tensor qa_golden(const NamedTensors& tensors, const std::string& name) {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  FAIL("golden tensor missing: " << name);
  return {};
}

double qa_excess(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor g = got.detach().to(at::kDouble), w = want.to(at::kDouble);
  return ((g - w).abs() - (kQaLogitTol + kQaLogitTol * w.abs())).max().item<double>();
}

void check_qa_fixture(const std::string& name, bool unpadded) {
  CAPTURE(name);
  CAPTURE(unpadded);
  HfModel hf = load_hf_folder(kQaGolden + name);
  CHECK(hf.config.task == Task::kQuestionAnswering);
  CHECK(hf.report.missing_keys.empty());
  CHECK_MESSAGE(hf.report.unexpected_keys.empty(), hf.report.message() << " arch " << hf.config.architecture());
  const NamedTensors golden = SafetensorsFile(kQaGolden + name + "/golden.safetensors").all_tensors();
  TaskModel& model = *hf.model;
  model.eval();
  model.set_unpadded(unpadded);
  Batch batch;
  batch.input_ids = qa_golden(golden, "input_ids");
  batch.token_type_ids = qa_golden(golden, "token_type_ids");
  batch.attention_mask = qa_golden(golden, "attention_mask");
  const at::Tensor logits = model.forward_batch(batch);  // [B, L, 2], -inf at padding
  REQUIRE(logits.sizes() == at::IntArrayRef({3, 9, 2}));
  const at::Tensor padding = batch.attention_mask.eq(0);
  CHECK(logits.select(2, 0).masked_select(padding).isinf().all().item<bool>());
  const at::Tensor finite = logits.masked_fill(padding.unsqueeze(-1), 0.0);
  CHECK(qa_excess(finite.select(2, 0), qa_golden(golden, "start_logits")) <= 0);
  CHECK(qa_excess(finite.select(2, 1), qa_golden(golden, "end_logits")) <= 0);
  const at::Tensor loss = model.loss(logits, qa_golden(golden, "positions"));
  CHECK(qa_excess(loss.reshape({1}), qa_golden(golden, "loss")) <= 0);
  loss.backward();
  for (const auto& [param_name, param] : model.state_dict()) {
    CAPTURE(param_name);
    REQUIRE(param.grad().defined());
    CHECK(param.grad().isfinite().all().item<bool>());
  }
}

}  // namespace qa_model_test

using namespace qa_model_test;

TEST_CASE("qa heads: start and end logits and the loss match the float64 reference, padded and packed") {
  for (const char* name : {"roberta_qa_l2", "distilbert_qa_l2"})
    for (bool unpadded : {false, true}) check_qa_fixture(name, unpadded);
}

TEST_CASE("qa heads: HF's names for every family") {
  const std::pair<const char*, const char*> expected[] = {{"roberta_qa_l2", "RobertaForQuestionAnswering"},
                                                          {"distilbert_qa_l2", "DistilBertForQuestionAnswering"}};
  for (const auto& [name, architecture] : expected) {
    const HfModel hf = load_hf_folder(kQaGolden + name);
    CHECK(hf.config.architecture() == architecture);
    bool has_head = false;
    for (const auto& [param_name, param] : hf.model->state_dict())
      has_head |= param_name == "qa_outputs.weight" && param.size(0) == 2;
    CHECK(has_head);
  }
  // A BERT, ELECTRA, ModernBERT and DeBERTa-v2 question-answering model from their configs.
  const std::pair<ModelFamily, const char*> families[] = {
      {ModelFamily::kBert, "BertForQuestionAnswering"}, {ModelFamily::kElectra, "ElectraForQuestionAnswering"},
      {ModelFamily::kModernBert, "ModernBertForQuestionAnswering"},
      {ModelFamily::kDebertaV2, "DebertaV2ForQuestionAnswering"}};
  for (const auto& [family, architecture] : families) {
    EncoderConfig c;
    c.family = family;
    c.task = Task::kQuestionAnswering;
    CHECK(c.architecture() == architecture);
  }
}
