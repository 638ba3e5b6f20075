// The pure half of checkpoint reading (src/checkpoint/checkpoint_format.h,
// train/train_state.h): what a hostile file's metadata or a rank's slice
// records can say, judged without MPI or HDF5. The fuzz target
// tests/fuzz/fuzz_checkpoint.cpp drives the same functions.
#include <torch/torch.h>

#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <map>
#include <string>

// Private to the library (src/ is not on the tests' include path).
#include "../src/checkpoint/checkpoint_format.h"
#include "shardtrain/core/check.h"
#include "shardtrain/train/train_state.h"

using namespace shardtrain;
namespace checkpoint_format_detail = shardtrain::detail;  // not ATen's `detail`

namespace {

checkpoint_format_detail::SliceRecord checkpoint_format_record(int rank, int dtype, std::vector<int64_t> shape, int64_t begin,
                                             int64_t count) {
  checkpoint_format_detail::SliceRecord r;
  r.rank = rank;
  r.name = "w";
  r.dtype = dtype;
  r.shape = std::move(shape);
  r.begin = begin;
  r.count = count;
  return r;
}

}  // namespace

TEST_CASE("numel_of refuses shapes whose element count is negative or overflows int64") {
  CHECK(checkpoint_format_detail::numel_of({}) == 1);
  CHECK(checkpoint_format_detail::numel_of({3, 4}) == 12);
  CHECK(checkpoint_format_detail::numel_of({0, int64_t(1) << 62, 8}) == 0);
  // 2^40 * 2^40 wrapped to 0 before: a hostile shape read as an empty tensor.
  CHECK_THROWS_WITH_AS(checkpoint_format_detail::numel_of({int64_t(1) << 40, int64_t(1) << 40}),
                       doctest::Contains("more than 2^63 elements"), Error);
  // -4 * -4 = 16 before.
  CHECK_THROWS_WITH_AS(checkpoint_format_detail::numel_of({-4, -4}), doctest::Contains("negative dimension"), Error);
}

TEST_CASE("plan_group range-checks dtype codes and slice ranges from other ranks") {
  // Code 7 indexed past the 4-entry dtype table before.
  CHECK_THROWS_WITH_AS(checkpoint_format_detail::plan_group({checkpoint_format_record(0, 7, {4}, 0, 4)}, "/model", true),
                       doctest::Contains("/model/w: rank 0 sent dtype code 7"), Error);
  CHECK_THROWS_AS(checkpoint_format_detail::plan_group({checkpoint_format_record(1, -1, {4}, 0, 4)}, "/model", false), Error);
  // Two ranks disagreeing with a bad code: the message names it, not table[9].name.
  CHECK_THROWS_WITH_AS(checkpoint_format_detail::plan_group({checkpoint_format_record(0, 0, {4}, 0, 4),
                                           checkpoint_format_record(1, 9, {4}, 0, 4)},
                                          "/model", false),
                       doctest::Contains("dtype code 9"), Error);
  // begin + count overflowed to a negative end and passed the check before.
  const int64_t max = std::numeric_limits<int64_t>::max();
  CHECK_THROWS_WITH_AS(checkpoint_format_detail::plan_group({checkpoint_format_record(0, 0, {max}, max, max)}, "/model", false),
                       doctest::Contains("beyond 2^63) is outside the tensor's"), Error);
  CHECK_THROWS_AS(checkpoint_format_detail::plan_group({checkpoint_format_record(0, 0, {int64_t(1) << 40, int64_t(1) << 40}, 0, 1)},
                                     "/model", false),
                  Error);
  // Good records still plan.
  const auto plans = checkpoint_format_detail::plan_group({checkpoint_format_record(0, 1, {2, 4}, 0, 4),
                                         checkpoint_format_record(1, 1, {2, 4}, 4, 4)},
                                        "/model", true);
  REQUIRE(plans.size() == 1);
  CHECK(std::string(checkpoint_format_detail::dtype_name(plans.at("w").dtype)) == "float64");
  CHECK_THROWS_AS(checkpoint_format_detail::dtype_name(checkpoint_format_detail::kNumDtypes), Error);
}

TEST_CASE("parse_train_state reads back what train_state_attributes stores") {
  TrainState state;
  state.step = 120;
  state.epoch = 2;
  state.world_size = 4;
  state.strategy = "zero3";
  state.vocab_text = "[PAD]\n[UNK]\n";
  state.skipped_steps = 3;
  state.loss_scale = 1024;
  state.early_stopped = 1;
  state.stop_reason = "patience";
  const TrainAttributes attributes = train_state_attributes(state);
  CHECK(attributes.size() == train_state_fields().size());
  const TrainState back = parse_train_state(attributes, "x.h5");
  CHECK(back.step == 120);
  CHECK(back.epoch == 2);
  CHECK(back.world_size == 4);
  CHECK(back.strategy == "zero3");
  CHECK(back.vocab_text == state.vocab_text);
  CHECK(back.skipped_steps == 3);
  CHECK(back.loss_scale == 1024);
  CHECK(back.stop_reason == "patience");

  // A checkpoint from before the fp16 and early-stopping attributes.
  TrainAttributes old = attributes;
  for (const char* name : {"skipped_steps", "loss_scale", "loss_scale_good_steps", "loss_scale_hysteresis_left",
                           "early_stopping_best", "early_stopping_best_step", "early_stopping_bad_evals",
                           "early_stopped", "stop_reason"})
    old.erase(name);
  CHECK(parse_train_state(old, "old.h5").skipped_steps == 0);

  // The progress log's window (issue 37, item 11): read back; absent in older files.
  TrainState windowed = state;
  windowed.log_window_loss_sum = 2.5;
  windowed.log_window_grad_norm_sum = 0.75;
  windowed.log_window_steps = 3;
  const TrainState read = parse_train_state(train_state_attributes(windowed), "w.h5");
  CHECK(read.log_window_loss_sum == 2.5);
  CHECK(read.log_window_grad_norm_sum == 0.75);
  CHECK(read.log_window_steps == 3);
  TrainAttributes before_window = train_state_attributes(windowed);
  for (const char* name : {"log_window_loss_sum", "log_window_grad_norm_sum", "log_window_steps"}) before_window.erase(name);
  CHECK(parse_train_state(before_window, "old.h5").log_window_steps == 0);
  TrainAttributes too_many = train_state_attributes(windowed);
  too_many["log_window_steps"] = int64_t{121};
  CHECK_THROWS_WITH_AS(parse_train_state(too_many, "w.h5"),
                       doctest::Contains("log_window_steps = 121 is above the step (120)"), Error);
}

// Issue 37, item 2: the attributes' checksums and their table.
TEST_CASE("attribute checksums: every bit, the length and the kind count; the table round-trips and refuses damage") {
  using checkpoint_format_detail::AttributeKind;
  const std::string config = R"({"hidden_act": "gelu"})";
  const uint64_t base = checkpoint_format_detail::attribute_checksum(AttributeKind::kString, config);
  std::string relu = config;
  relu.replace(relu.find("gelu"), 4, "relu");
  CHECK(checkpoint_format_detail::attribute_checksum(AttributeKind::kString, relu) != base);
  for (size_t byte = 0; byte < config.size(); ++byte)
    for (int bit = 0; bit < 8; ++bit) {
      std::string flipped = config;
      flipped[byte] = static_cast<char>(flipped[byte] ^ (1 << bit));
      CHECK(checkpoint_format_detail::attribute_checksum(AttributeKind::kString, flipped) != base);
    }
  CHECK(checkpoint_format_detail::attribute_checksum(AttributeKind::kBytes, config) != base);
  CHECK(checkpoint_format_detail::attribute_checksum(AttributeKind::kString, config + std::string(1, '\0')) != base);
  CHECK(checkpoint_format_detail::attribute_checksum(AttributeKind::kString, "ab") != checkpoint_format_detail::attribute_checksum(AttributeKind::kString, "ba"));
  CHECK(checkpoint_format_detail::attribute_checksum(AttributeKind::kString, "") != checkpoint_format_detail::attribute_checksum(AttributeKind::kBytes, ""));

  std::map<std::string, checkpoint_format_detail::AttributeChecksum> table;
  table["step"] = {AttributeKind::kInteger, 0x0123456789abcdefULL};
  table["model config"] = {AttributeKind::kString, base};
  table["lr"] = {AttributeKind::kFloat, 7};
  table["rng"] = {AttributeKind::kBytes, ~uint64_t{0}};
  const std::string text = checkpoint_format_detail::encode_attribute_checksums(table);
  CHECK(text.find("int 0123456789abcdef step\n") != std::string::npos);
  const auto back = checkpoint_format_detail::decode_attribute_checksums(text, "c.h5");
  REQUIRE(back.size() == 4);
  for (const auto& [name, entry] : table) {
    CHECK(back.at(name).kind == entry.kind);
    CHECK(back.at(name).checksum == entry.checksum);
  }
  for (const char* bad : {"int 0123456789abcdef step", "long 0123456789abcdef step\n", "int 0123456789abcdeg step\n",
                          "int 0123 step\n", "int 0123456789abcdef \n", "int 0123456789abcdef a\nint 0123456789abcdef a\n",
                          "int 0123456789ABCDEF step\n", "\n"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(checkpoint_format_detail::decode_attribute_checksums(bad, "c.h5"),
                         doctest::Contains("c.h5: attribute shardtrain_attribute_checksums is damaged (line"), Error);
  }
  CHECK(checkpoint_format_detail::decode_attribute_checksums("", "c.h5").empty());
  CHECK_THROWS_WITH_AS(checkpoint_format_detail::encode_attribute_checksums({{"two\nlines", {}}}), doctest::Contains("on one line"), Error);
}

TEST_CASE("parse_train_state refuses missing, mistyped and out-of-range attributes, naming the file") {
  const TrainAttributes good = train_state_attributes(TrainState{});
  auto with = [&](const char* name, TrainAttribute value) {
    TrainAttributes a = good;
    a[name] = std::move(value);
    return a;
  };
  TrainAttributes no_kind = good;
  no_kind.erase("kind");
  CHECK_THROWS_WITH_AS(parse_train_state(no_kind, "a.h5"), doctest::Contains("a.h5 is a shardtrain checkpoint but not"),
                       Error);
  CHECK_THROWS_WITH_AS(parse_train_state(with("kind", std::string("other")), "a.h5"),
                       doctest::Contains("of kind 'other'"), Error);
  TrainAttributes no_step = good;
  no_step.erase("step");
  CHECK_THROWS_WITH_AS(parse_train_state(no_step, "a.h5"), doctest::Contains("a.h5: checkpoint has no attribute 'step'"),
                       Error);
  CHECK_THROWS_WITH_AS(parse_train_state(with("step", 1.5), "a.h5"),
                       doctest::Contains("attribute 'step' is not an integer"), Error);
  CHECK_THROWS_WITH_AS(parse_train_state(with("strategy", int64_t(3)), "a.h5"),
                       doctest::Contains("attribute 'strategy' is not a string"), Error);
  CHECK_THROWS_WITH_AS(parse_train_state(with("step", int64_t(-1)), "a.h5"),
                       doctest::Contains("attribute step = -1 is below 0"), Error);
  CHECK_THROWS_WITH_AS(parse_train_state(with("world_size", int64_t(0)), "a.h5"),
                       doctest::Contains("attribute world_size = 0 is below 1"), Error);
  CHECK_THROWS_WITH_AS(parse_train_state(with("batches_consumed", std::numeric_limits<int64_t>::min()), "a.h5"),
                       doctest::Contains("batches_consumed"), Error);
  CHECK_THROWS_WITH_AS(parse_train_state(with("skipped_steps", int64_t(5)), "a.h5"),
                       doctest::Contains("skipped_steps = 5 is not between 0 and the step (0)"), Error);
}
