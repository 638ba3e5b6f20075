// Resuming mid-epoch with data.group_by_length toggled since the checkpoint
// (train/train_checkpoint.h, resume_data_order_warnings): a warning naming the
// key, the old value and what it does to the epoch; none at an epoch boundary
// or when the value is unchanged.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <string>

#include "shardtrain/config/config.h"
#include "shardtrain/core/run_config.h"
#include "shardtrain/train/train_checkpoint.h"

namespace test_resume_warnings_test {

using namespace shardtrain;

TrainState resume_warnings_state(bool group_by_length, int64_t batches_consumed) {
  RunConfig config;
  config.data.group_by_length = group_by_length;
  TrainState state;
  state.config_toml = config_to_toml(config);  // what the checkpoint stores
  state.step = 7;
  state.epoch = 1;
  state.batches_consumed = batches_consumed;
  return state;
}

TEST_CASE("data.group_by_length toggled on a mid-epoch resume is warned about") {
  const auto toggled = resume_warnings_state(false, 5);
  REQUIRE(resume_data_order_warnings(toggled, true).size() == 1);
  const std::string w = resume_data_order_warnings(toggled, true)[0];
  CHECK(w.find("data.group_by_length was false when this checkpoint was written (step 7, 5 batches into epoch 1) "
               "and is true now") == 0);
  CHECK(w.find("resume with data.group_by_length = false") != std::string::npos);
  CHECK(resume_data_order_warnings(resume_warnings_state(true, 5), false).size() == 1);
  CHECK(resume_data_order_warnings(toggled, false).empty());                       // unchanged
  CHECK(resume_data_order_warnings(resume_warnings_state(false, 0), true).empty());  // at an epoch boundary
  TrainState no_config = toggled;
  no_config.config_toml.clear();
  CHECK(resume_data_order_warnings(no_config, true).empty());
}

}  // namespace test_resume_warnings_test
