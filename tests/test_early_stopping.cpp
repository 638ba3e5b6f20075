// Early stopping's rule, transformers' EarlyStoppingCallback: the first
// evaluation sets the best; an evaluation improves only when it beats the best
// by more than the threshold (in the direction of checkpoint.score_order);
// training stops after `patience` evaluations in a row without improvement;
// reports without the metric do not count; the state round-trips.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <map>
#include <string>

#include "shardtrain/train/early_stopping.h"

using namespace shardtrain;

namespace early_stopping_test {
namespace {

EarlyStopping make_early(int64_t patience, double threshold, ScoreOrder order) {
  TrainConfig train;
  train.early_stopping_patience = patience;
  train.early_stopping_threshold = threshold;
  CheckpointConfig checkpoint;
  checkpoint.score_attribute = "eval_mcc";
  checkpoint.score_order = order;
  return EarlyStopping(train, checkpoint);
}

std::map<std::string, double> mcc(double value) { return {{"eval_mcc", value}, {"train_loss", 0.5}}; }

}  // namespace

TEST_CASE("patience counts evaluations in a row that do not beat the best by more than the threshold") {
  EarlyStopping early = make_early(2, 0.01, ScoreOrder::kMax);
  CHECK(early.enabled());
  CHECK_FALSE(early.update(mcc(0.20), 10));  // sets the best
  CHECK_FALSE(early.update(mcc(0.205), 20));  // better, but by less than 0.01: no improvement (1)
  CHECK(early.state().bad_evals == 1);
  CHECK(*early.state().best == 0.20);
  CHECK_FALSE(early.update({{"train_loss", 0.4}}, 25));  // no eval_mcc: not counted
  CHECK(early.state().bad_evals == 1);
  CHECK_FALSE(early.update(mcc(0.30), 30));  // improvement: the count starts again
  CHECK(early.state().bad_evals == 0);
  CHECK(early.state().best_step == 30);
  CHECK_FALSE(early.update(mcc(0.30), 40));  // equal is not better (1)
  CHECK(early.update(mcc(0.10), 50));        // worse (2): stop
  CHECK(early.state().stopped);
  CHECK(early.reason() ==
        "eval_mcc did not improve on its best 0.3000 (step 30) by more than 0.01 for 2 evaluations "
        "(train.early_stopping_patience = 2)");
  CHECK(early.update(mcc(0.90), 60));  // stopped stays stopped
}

TEST_CASE("score_order min: smaller is better; threshold 0 takes any improvement; state round-trips") {
  EarlyStopping early = make_early(1, 0.0, ScoreOrder::kMin);
  CHECK_FALSE(early.update(mcc(0.7), 1));
  CHECK_FALSE(early.update(mcc(0.6999), 2));  // smaller by 1e-4 > 0
  CHECK(*early.state().best == 0.6999);
  EarlyStopping resumed = make_early(1, 0.0, ScoreOrder::kMin);
  resumed.load(early.state());
  CHECK(resumed.update(mcc(0.8), 3));  // patience 1: the first bad evaluation stops
  CHECK(resumed.state().best_step == 2);
}

TEST_CASE("patience 0 is off") {
  EarlyStopping early = make_early(0, 0.0, ScoreOrder::kMax);
  CHECK_FALSE(early.enabled());
  for (int i = 0; i < 5; ++i) CHECK_FALSE(early.update(mcc(0.1), i));
}

}  // namespace early_stopping_test
