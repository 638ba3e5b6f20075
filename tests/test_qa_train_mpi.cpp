// Extractive QA end to end on a tiny random BERT and a few SQuAD paragraphs
// (windows of 64 tokens, stride 16, so questions have several features):
// every strategy trains like DDP (padded and packed), evaluation gives the
// same answers and EM / F1 on 1 rank and on 2 or 3 (the windows of a question
// on different ranks), and a stopped run resumes exactly. Runs at -np 2 and
// -np 4. `predict` gives evaluation's answers at any rank count.
//
// Tolerance: parameters within 5e-6 of DDP's after 3 steps at lr 1e-3
// (test_family_strategies_mpi.cpp says why AdamW carries reduction-order
// rounding that far); the eval metrics compared within 1e-9 of each other.
#include <torch/torch.h>

#include <doctest/doctest.h>
#include <mpi.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/mpi_ranks.h"
#include "support/task_fixtures.h"
#include "support/train_fixtures.h"
#include "shardtrain/data/qa_data.h"
#include "shardtrain/tasks/question_answering.h"
#include "shardtrain/data/tokenizer.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/model/hf_folder.h"
#include "shardtrain/train/checkpoint_manager.h"
#include "shardtrain/train/evaluate.h"
#include "shardtrain/predict/predict.h"
#include "shardtrain/train/trainer.h"

using namespace shardtrain;

namespace qa_train_mpi_test {
using shardtrain_test::world_rank;
using shardtrain_test::world_size;
using shardtrain_test::squad_part;

namespace {

constexpr double kQaParamTolerance = 5e-6;

RunConfig qa_config(const std::string& dir) {
  RunConfig c = shardtrain_test::tiny_run_config(dir);
  c.model.task = Task::kQuestionAnswering;
  c.model.hidden_dropout_prob = 0.0;
  c.model.attention_probs_dropout_prob = 0.0;
  c.data.train_file = squad_part(dir, "train.json", 0, 0, 3);
  c.data.eval_file = squad_part(dir, "dev.json", 1, 0, 2);
  c.data.format = FileFormat::kAuto;
  c.data.max_length = 64;
  c.data.doc_stride = 16;
  c.train.num_epochs = 1;
  c.train.max_steps = 3;
  c.train.gradient_accumulation_steps = 1;
  c.train.max_grad_norm = 1.0;
  c.checkpoint.every_epochs = 0;
  return c;
}

TrainOptions qa_quiet() { return shardtrain_test::quiet_train_options(); }

const std::map<std::string, double>& last_metrics(const TrainResult& r) { return r.reports.back().metrics; }

// Collective: evaluation's metrics and answers of `features` (of `table`),
// through the task's spec as train runs it.
std::map<std::string, double> qa_evaluate(TaskModel& model, const TokenizedDataset& features, const QaTable& table,
                                          const DataConfig& data, int64_t batch_size, int32_t pad_id, MPI_Comm comm,
                                          std::vector<QaAnswer>* answers) {
  QuestionsTable questions;
  questions.rows = table;
  questions.line_numbers = table.line_numbers;
  questions.has_labels = true;
  const EvalSettings settings{&data, model_labels(model)};
  const TaskSpec& spec = task_spec(Task::kQuestionAnswering);
  const std::vector<float> records = sharded_records(model, features, batch_size, pad_id, at::kCPU, comm,
                                                     spec.record_width(features, settings),
                                                     spec.record(features, settings));
  const auto predictions = spec.predictions(questions, features, records, settings);
  if (answers) *answers = dynamic_cast<const QaPredictions&>(*predictions).answers;
  return predictions->metrics;
}

}  // namespace

TEST_CASE("qa: every strategy trains like DDP, padded and packed, and evaluates to the same EM / F1") {
  const std::string dir = shardtrain_test::make_shared_temp_dir("qa_strategies");
  const RunConfig config = qa_config(dir);
  // DDP is the reference of each layout: padded and packed rows round
  // differently, and AdamW carries that into tiny-gradient rows (~1e-4 here).
  auto run = [&](StrategyKind strategy, bool unpadded) {
    RunConfig c = config;
    c.parallel.strategy = strategy;
    c.model.unpadded = unpadded;
    c.run.name = std::string(enum_name(strategy)) + (unpadded ? "_packed" : "_padded");
    return train(c, MPI_COMM_WORLD, qa_quiet());
  };
  const TrainResult padded = run(StrategyKind::kDdp, false);
  const TrainResult packed = run(StrategyKind::kDdp, true);
  REQUIRE(padded.finished);
  REQUIRE(padded.steps == 3);
  const auto& reference = last_metrics(padded);
  for (const char* key : {"eval_exact_match", "eval_f1", "eval_loss"}) CHECK(reference.count(key) == 1);
  REQUIRE(padded.baseline.has_value());
  CHECK(padded.baseline->name == "first sentence of the context");
  CHECK(padded.baseline->metrics.at("eval_f1") > 0.0);
  // The layouts compute the same loss and answers.
  CHECK(last_metrics(packed).at("train_loss") == doctest::Approx(reference.at("train_loss")).epsilon(1e-5));
  CHECK(last_metrics(packed).at("eval_loss") == doctest::Approx(reference.at("eval_loss")).epsilon(1e-5));
  CHECK(last_metrics(packed).at("eval_f1") == reference.at("eval_f1"));

  struct Variant {
    StrategyKind strategy;
    bool unpadded;
  };
  for (const Variant v : {Variant{StrategyKind::kZero1, false}, Variant{StrategyKind::kZero2, true},
                          Variant{StrategyKind::kZero3, true}, Variant{StrategyKind::kFsdp, false}}) {
    CAPTURE(enum_name(v.strategy));
    CAPTURE(v.unpadded);
    const TrainResult& ddp = v.unpadded ? packed : padded;
    const TrainResult r = run(v.strategy, v.unpadded);
    REQUIRE(r.steps == 3);
    CHECK((r.final_params - ddp.final_params).abs().max().item<double>() < kQaParamTolerance);
    CHECK(last_metrics(r).at("train_loss") == doctest::Approx(last_metrics(ddp).at("train_loss")).epsilon(1e-5));
    CHECK(last_metrics(r).at("eval_f1") == doctest::Approx(last_metrics(ddp).at("eval_f1")).epsilon(1e-9));
    CHECK(last_metrics(r).at("eval_exact_match") ==
          doctest::Approx(last_metrics(ddp).at("eval_exact_match")).epsilon(1e-9));
  }
  shardtrain_test::remove_shared_dir(dir);
}

TEST_CASE("qa: evaluation on 1 rank and on 2 or 3 gives the same answers and EM / F1") {
  const std::string dir = shardtrain_test::make_shared_temp_dir("qa_eval_ranks");
  const std::string dev = squad_part(dir, "dev.json", 2, 0, 3);
  const QaTable table = read_qa_table(dev, {});
  const Tokenizer tokenizer = Tokenizer::from_vocab_file(
      std::string(SHARDTRAIN_SOURCE_DIR) + "/data/vocab/bert-base-cased-vocab.txt", TokenizerOptions{});
  EncoderConfig model_config = EncoderConfig::from_file(std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/data/bert_h32.json");
  model_config.task = Task::kQuestionAnswering;
  model_config.set_num_labels(2);
  TaskModel model(model_config);
  model.init_weights(11);
  QaFeatureOptions feature_options;
  feature_options.max_length = 48;
  feature_options.doc_stride = 12;
  const DataConfig post;  // run_qa's post-processing defaults
  // Batch 1: a feature's logits do not depend on what else is in its batch,
  // so any difference would be the sharding's or the gather's.
  auto evaluate_on = [&](MPI_Comm comm, std::vector<QaAnswer>* answers) {
    const TokenizedDataset features = build_qa_features(table, tokenizer, feature_options, comm);
    REQUIRE(features.size() > table.size() + 3);  // several windows per question
    return qa_evaluate(model, features, table, post, 1, tokenizer.pad_id(), comm, answers);
  };
  std::vector<QaAnswer> all_answers;
  const auto all = evaluate_on(MPI_COMM_WORLD, &all_answers);
  // One rank alone, and ranks 0-2 (at -np 4).
  for (int ranks : {1, 3}) {
    if (ranks > world_size()) continue;
    MPI_Comm part = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, world_rank() < ranks ? 0 : MPI_UNDEFINED, world_rank(), &part);
    if (part == MPI_COMM_NULL) continue;
    CAPTURE(ranks);
    std::vector<QaAnswer> answers;
    const auto m = evaluate_on(part, &answers);
    MPI_Comm_free(&part);
    CHECK(m.at("eval_exact_match") == all.at("eval_exact_match"));
    CHECK(m.at("eval_f1") == all.at("eval_f1"));
    CHECK(m.at("eval_loss") == doctest::Approx(all.at("eval_loss")).epsilon(1e-6));
    REQUIRE(answers.size() == all_answers.size());
    for (size_t q = 0; q < answers.size(); ++q) {
      CHECK(answers[q].text == all_answers[q].text);
      CHECK(answers[q].start_char == all_answers[q].start_char);
    }
  }
  CHECK(all_answers.size() == static_cast<size_t>(table.size()));
  shardtrain_test::remove_shared_dir(dir);
}

TEST_CASE("qa: a run stopped between checkpoints and re-run ends exactly like an uninterrupted one") {
  const std::string dir = shardtrain_test::make_shared_temp_dir("qa_resume");
  RunConfig config = qa_config(dir);
  config.model.hidden_dropout_prob.reset();  // dropout on: the reseeding must make it exact too
  config.model.attention_probs_dropout_prob.reset();
  config.train.max_steps = 5;
  config.train.eval_every_steps = 2;
  config.checkpoint.every_steps = 2;
  config.run.name = "straight";
  const TrainResult straight = train(config, MPI_COMM_WORLD, qa_quiet());
  REQUIRE(straight.steps == 5);
  config.run.name = "interrupted";
  TrainOptions stop = qa_quiet();
  stop.stop_after_step = 3;
  const TrainResult first = train(config, MPI_COMM_WORLD, stop);
  CHECK(first.steps == 3);
  const TrainResult second = train(config, MPI_COMM_WORLD, qa_quiet());
  CHECK_FALSE(second.resumed_from.empty());
  CHECK(second.steps == 5);
  CHECK(at::equal(second.final_params, straight.final_params));
  CHECK(last_metrics(second).at("eval_f1") == last_metrics(straight).at("eval_f1"));
  shardtrain_test::remove_shared_dir(dir);
}

TEST_CASE("qa predict: the answers on 1 rank and on all ranks are evaluation's, gold answers read or not") {
  const std::string dir = shardtrain_test::make_shared_temp_dir("qa_predict");
  const std::string dev = squad_part(dir, "dev.json", 3, 0, 2);
  const std::string folder = dir + "/model";
  if (world_rank() == 0) {
    EncoderConfig config = EncoderConfig::from_file(std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/data/bert_h32.json");
    config.task = Task::kQuestionAnswering;
    config.set_num_labels(2);
    TaskModel model(config);
    model.init_weights(5);
    save_hf_folder(model, folder);
    std::filesystem::copy_file(std::string(SHARDTRAIN_SOURCE_DIR) + "/data/vocab/bert-base-cased-vocab.txt",
                               folder + "/vocab.txt");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  PredictOptions options;
  options.model_dir = folder;
  options.data_path = dev;
  options.data.max_length = 48;
  options.data.doc_stride = 12;
  options.batch_size = 1;  // a window's logits then do not depend on the sharding (see above)
  options.labels = LabelUse::kRequired;
  const PredictModel model = load_predict_model(options, MPI_COMM_WORLD);
  REQUIRE(model.config.task == Task::kQuestionAnswering);
  const PredictResult all_result = predict_file(options, model, MPI_COMM_WORLD);
  const PredictResult alone_result = predict_file(options, load_predict_model(options, MPI_COMM_SELF), MPI_COMM_SELF);
  options.labels = LabelUse::kNone;
  const PredictResult unscored_result = predict_file(options, model, MPI_COMM_WORLD);
  const QaPredictions& all = all_result.as<QaPredictions>();
  const QaPredictions& alone = alone_result.as<QaPredictions>();
  const QaPredictions& unscored = unscored_result.as<QaPredictions>();
  CHECK(unscored.metrics.empty());

  const QaTable table = read_qa_table(dev, {});
  QaFeatureOptions feature_options;
  feature_options.max_length = 48;
  feature_options.doc_stride = 12;
  const TokenizedDataset features = build_qa_features(table, model.tokenizer, feature_options, MPI_COMM_WORLD);
  REQUIRE(all.num_features == features.size());
  REQUIRE(features.size() > table.size() + 3);  // several windows per question
  std::vector<QaAnswer> evaluated;
  const auto metrics = qa_evaluate(*model.model, features, table, options.data, 1, model.tokenizer.pad_id(),
                                   MPI_COMM_WORLD, &evaluated);
  CHECK(all.metrics.at("eval_exact_match") == metrics.at("eval_exact_match"));
  CHECK(all.metrics.at("eval_f1") == metrics.at("eval_f1"));
  CHECK(alone.metrics.at("eval_f1") == metrics.at("eval_f1"));
  REQUIRE(all.answers.size() == evaluated.size());
  for (size_t q = 0; q < evaluated.size(); ++q) {
    CAPTURE(q);
    for (const QaPredictions* r : {&all, &alone, &unscored}) {
      CHECK(r->table.examples[q].id == table.examples[q].id);
      CHECK(r->answers[q].text == evaluated[q].text);
      CHECK(r->answers[q].start_char == evaluated[q].start_char);
      CHECK(r->answers[q].score == evaluated[q].score);
    }
  }
  shardtrain_test::remove_shared_dir(dir);
}

}  // namespace qa_train_mpi_test
