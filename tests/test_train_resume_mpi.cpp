// What a re-run or a --resume may and may not do to a run folder (defects of
// a hostile run, issue 24): a refused job leaves every record as it was; a run
// whose checkpoints are all damaged is not silently started over; a finished
// run's config.toml is not rewritten; a run stopped early can go on with a
// larger patience; the step plan refuses overflowing keys, and a
// score_attribute the task never reports; the last report's epoch is the
// checkpoint's, and early stopping at the last step is no early stop.
// Runs at -np 2 and -np 4.
#include <torch/torch.h>

#include <doctest/doctest.h>
#include <mpi.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>

#include "support/mpi_ranks.h"
#include "support/train_fixtures.h"
#include "shardtrain/checkpoint/checkpoint.h"
#include "shardtrain/core/check.h"
#include "shardtrain/train/checkpoint_manager.h"
#include "shardtrain/train/job.h"
#include "shardtrain/train/train_checkpoint.h"
#include "shardtrain/train/trainer.h"

namespace fs = std::filesystem;
using namespace shardtrain;

namespace train_resume_mpi_test {
using shardtrain_test::world_rank;

namespace {

std::string error_of_train(const RunConfig& config, const TrainOptions& options) {
  try {
    train(config, MPI_COMM_WORLD, options);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string error_of_build(const RunConfig& config) {
  try {
    build_job(config, MPI_COMM_WORLD);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Every file of a run folder (TensorBoard's too) by name, with its bytes.
std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(dir))
    if (entry.is_regular_file() && entry.path().filename() != "train.log")
      files[fs::relative(entry.path(), dir).string()] = file_text(entry.path().string());
  return files;
}

TrainOptions with_toml(const std::string& text) {
  TrainOptions o = shardtrain_test::quiet_train_options();
  o.config_toml = text;
  return o;
}

}  // namespace

TEST_CASE("a resume refused because the training data changed leaves the run folder as it was") {
  const std::string dir = shardtrain_test::make_shared_temp_dir("resume_refused");
  RunConfig config = shardtrain_test::tiny_run_config(dir);
  config.checkpoint.every_steps = 5;
  TrainOptions stop = with_toml("# first\n");
  stop.stop_after_step = 6;  // a checkpoint 5 batches into the first epoch
  train(config, MPI_COMM_WORLD, stop);
  std::map<std::string, std::string> before;
  if (world_rank() == 0) before = snapshot(dir + "/run");
  // 16 rows: an epoch of 2 global batches at -np 2, 1 at -np 4.
  config.data.train_file = shardtrain_test::head_of_shipped("data/glue/MRPC/train.tsv", 16, dir, "small.tsv");
  const std::string error = error_of_train(config, with_toml("# second\n"));
  CHECK(has(error, checkpoint_path(dir + "/run", 1) + " was saved 5 global batches into epoch 0"));
  CHECK(has(error, "data.train_file (" + config.data.train_file + ": 16 rows)"));
  CHECK(has(error, "the training data changed"));
  if (world_rank() == 0) {
    const std::map<std::string, std::string> after = snapshot(dir + "/run");
    CHECK(before.count("result.jsonl") == 1);
    CHECK(before.count("progress.csv") == 1);
    CHECK(before.count("config.toml") == 1);
    CHECK(after == before);  // result.jsonl, progress.csv, config.toml, tensorboard/*, checkpoints
  }
  shardtrain_test::remove_shared_dir(dir);
}

TEST_CASE("every checkpoint damaged: refused, naming them, folder untouched; --restart starts over") {
  const std::string dir = shardtrain_test::make_shared_temp_dir("resume_damaged");
  RunConfig config = shardtrain_test::tiny_run_config(dir);
  config.train.num_epochs = 1;
  config.checkpoint.every_steps = 2;
  config.train.eval_every_steps = 2;
  TrainOptions stop = shardtrain_test::quiet_train_options();
  stop.stop_after_step = 5;
  train(config, MPI_COMM_WORLD, stop);
  const std::string run = dir + "/run";
  if (world_rank() == 0)
    for (int64_t i : {1, 2}) std::ofstream(checkpoint_path(run, i), std::ios::trunc) << "not hdf5";
  std::map<std::string, std::string> before;
  if (world_rank() == 0) before = snapshot(run);
  const std::string error = error_of_train(config, shardtrain_test::quiet_train_options());
  CHECK(has(error, run + " holds the records of an earlier run (2 reports in result.jsonl, and 2 checkpoints, every "
                         "one damaged: "));
  CHECK(has(error, checkpoint_path(run, 1)));
  CHECK(has(error, checkpoint_path(run, 2)));
  CHECK(has(error, "Nothing was changed. Pass --restart"));
  if (world_rank() == 0) CHECK(snapshot(run) == before);

  TrainOptions restart = shardtrain_test::quiet_train_options();
  restart.restart = true;
  const TrainResult fresh = train(config, MPI_COMM_WORLD, restart);
  CHECK(fresh.finished);
  CHECK(fresh.resumed_from.empty());
  if (world_rank() == 0)
    for (int64_t i : {1, 2}) CHECK(fs::exists(checkpoint_path(run, i) + ".damaged"));
  // Now there is an intact checkpoint: --restart is refused rather than mixing two runs.
  CHECK(has(error_of_train(config, restart), "is an intact checkpoint to resume from; --restart only starts over"));
  shardtrain_test::remove_shared_dir(dir);
}

TEST_CASE("a finished run re-run with other flags does nothing and keeps its config.toml") {
  const std::string dir = shardtrain_test::make_shared_temp_dir("resume_finished");
  RunConfig config = shardtrain_test::tiny_run_config(dir);
  config.train.num_epochs = 1;
  REQUIRE(train(config, MPI_COMM_WORLD, with_toml("# lr 1e-3\n")).finished);
  std::map<std::string, std::string> before;
  if (world_rank() == 0) before = snapshot(dir + "/run");
  config.train.lr = 5e-4;
  const TrainResult again = train(config, MPI_COMM_WORLD, with_toml("# lr 5e-4\n"));
  CHECK(again.nothing_to_do);
  CHECK(again.reports.empty());
  if (world_rank() == 0) {
    CHECK(file_text(dir + "/run/config.toml") == "# lr 1e-3\n");
    CHECK(snapshot(dir + "/run") == before);
  }
  shardtrain_test::remove_shared_dir(dir);
}

TEST_CASE("a run stopped early goes on when resumed with a larger patience, not with the same") {
  const std::string dir = shardtrain_test::make_shared_temp_dir("resume_early");
  RunConfig config = shardtrain_test::tiny_run_config(dir);
  config.train.num_epochs = 3;
  config.train.eval_every_steps = 1;
  config.checkpoint.every_steps = 1;
  config.checkpoint.score_attribute = "eval_accuracy";
  config.checkpoint.score_order = ScoreOrder::kMax;
  config.train.early_stopping_patience = 2;
  config.train.early_stopping_threshold = 2.0;  // nothing improves by 2: stops at step 3
  config.run.name = "first";
  const TrainResult first = train(config, MPI_COMM_WORLD, shardtrain_test::quiet_train_options());
  REQUIRE(first.stopped_early);
  REQUIRE(first.steps == 3);

  TrainOptions resume = shardtrain_test::quiet_train_options();
  resume.resume_from = checkpoint_path(dir + "/first", 3);
  config.run.name = "same";
  const TrainResult same = train(config, MPI_COMM_WORLD, resume);
  CHECK(same.nothing_to_do);
  CHECK(same.stopped_early);
  CHECK(same.steps == 3);

  config.run.name = "more";
  config.train.early_stopping_patience = 4;  // two more evaluations without improvement
  const TrainResult more = train(config, MPI_COMM_WORLD, resume);
  CHECK_FALSE(more.nothing_to_do);
  CHECK(more.stopped_early);
  CHECK(more.steps == 5);
  CHECK(has(more.stop_reason, "for 4 evaluations (train.early_stopping_patience = 4)"));
  shardtrain_test::remove_shared_dir(dir);
}

TEST_CASE("epochs: a run ending mid-epoch reports the checkpoint's epoch; early stopping at the last step is no stop") {
  const std::string dir = shardtrain_test::make_shared_temp_dir("resume_epochs");
  RunConfig config = shardtrain_test::tiny_run_config(dir);
  config.train.max_steps = 5;  // an epoch is 12 steps at -np 2, 6 at -np 4
  config.train.eval_every_steps = 1;
  config.checkpoint.score_attribute = "eval_accuracy";
  config.checkpoint.score_order = ScoreOrder::kMax;
  config.train.early_stopping_patience = 4;  // the 4th evaluation without improvement is the 5th, the last step
  config.train.early_stopping_threshold = 2.0;
  const TrainResult result = train(config, MPI_COMM_WORLD, shardtrain_test::quiet_train_options());
  CHECK(result.finished);
  CHECK(result.steps == 5);
  CHECK_FALSE(result.stopped_early);
  CHECK(result.stop_reason.empty());
  REQUIRE_FALSE(result.reports.empty());
  CHECK(result.reports.back().stop_reason.empty());
  CHECK(result.reports.back().epoch == 0);
  if (world_rank() == 0) {
    CheckpointReader reader(result.last_checkpoint, MPI_COMM_SELF);
    const TrainState state = read_train_state(reader);
    CHECK(state.epoch == result.reports.back().epoch);
    CHECK(state.early_stopped == 0);
    std::ifstream in(dir + "/run/result.jsonl");
    std::string line, last;
    while (std::getline(in, line))
      if (!line.empty()) last = line;
    CHECK(nlohmann::json::parse(last)["epoch"] == state.epoch);
  }
  shardtrain_test::remove_shared_dir(dir);
}

TEST_CASE("the step plan refuses keys that overflow it, and a score_attribute the task never reports") {
  const std::string dir = shardtrain_test::make_shared_temp_dir("resume_plan");
  RunConfig config = shardtrain_test::tiny_run_config(dir);
  config.train.max_steps = std::numeric_limits<int64_t>::max();
  CHECK(has(error_of_build(config), "train.max_steps: 9223372036854775807 x "));
  config.train.max_steps = 0;
  config.train.num_epochs = 100000000000000000;  // 1e17
  CHECK(has(error_of_build(config), "train.num_epochs: "));
  config.train.num_epochs = 1;
  // MRPC has two labels: no eval_pearson (regression), no eval_macro_f1 (> 2 labels).
  config.checkpoint.score_attribute = "eval_pearson";
  const std::string pearson = error_of_build(config);
  CHECK(has(pearson, "checkpoint.score_attribute = \"eval_pearson\" is never reported by a 2-label classification task"));
  CHECK(has(pearson, "\"eval_accuracy\""));
  config.checkpoint.score_attribute = "eval_macro_f1";
  CHECK_FALSE(error_of_build(config).empty());
  config.checkpoint.score_attribute = "eval_mcc";
  CHECK(error_of_build(config).empty());
  shardtrain_test::remove_shared_dir(dir);
}

}  // namespace train_resume_mpi_test
