// TensorBoard event files (report/tensorboard.h) from the C++ side: the CRC-32C
// check values, HF's tag names, a write / read-back / trim round trip and the
// errors. The independent decoder (Python protobuf, TensorBoard's field
// numbers) is tests/check_tensorboard_events.py, CTest tensorboard_events_python.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "shardtrain/core/check.h"
#include "shardtrain/report/tensorboard.h"
#include "support/scratch_dir.h"

namespace test_tensorboard_test {

namespace fs = std::filesystem;
using namespace shardtrain;


TEST_CASE("CRC-32C check values and TFRecord's mask") {
  CHECK(crc32c("") == 0u);
  CHECK(crc32c("123456789") == 0xE3069283u);                 // the CRC-32C check value
  CHECK(crc32c(std::string(32, '\0')) == 0x8A9136AAu);       // RFC 3720 B.4
  CHECK(crc32c(std::string(32, '\xff')) == 0x62A8AB43u);     // RFC 3720 B.4
  const uint32_t c = 0xE3069283u;                              // mask: rotate right by 15, add 0xa282ead8
  CHECK(masked_crc32c("123456789") == static_cast<uint32_t>(((c >> 15) | (c << 17)) + 0xa282ead8u));
}

TEST_CASE("metric names become Hugging Face's TensorBoard tags") {
  CHECK(tensorboard_tag("eval_loss") == "eval/loss");
  CHECK(tensorboard_tag("eval_accuracy") == "eval/accuracy");
  CHECK(tensorboard_tag("test_f1") == "test/f1");
  CHECK(tensorboard_tag("loss") == "train/loss");
  CHECK(tensorboard_tag("learning_rate") == "train/learning_rate");
  CHECK(tensorboard_tag("train_loss") == "train/train_loss");  // HF adds the prefix to any other name
}

TEST_CASE("write, read back, trim for a resume") {
  shardtrain_test::ScratchDir s("tensorboard");
  const std::string dir = s.dir + "/run/tensorboard";
  std::string path;
  {
    TensorBoardWriter writer(dir, 1700000000.5);
    path = writer.path();
    for (int64_t step = 1; step <= 10; ++step) writer.add_scalar("train/loss", 1.0 / step, step, 1700000000.5 + step);
    writer.flush();
    CHECK(read_tensorboard_scalars(path).size() == 10);  // flushed: readable while the writer lives
  }
  const auto scalars = read_tensorboard_scalars(path);
  REQUIRE(scalars.size() == 10);
  CHECK(scalars[3].tag == "train/loss");
  CHECK(scalars[3].step == 4);
  CHECK(scalars[3].value == 0.25f);
  CHECK(scalars[3].wall_time == 1700000004.5);

  TensorBoardTrim trim = trim_tensorboard_events(dir, 6);
  CHECK(trim.num_files == 1);
  CHECK(trim.num_files_rewritten == 1);
  CHECK(trim.num_events_kept == 7);  // file_version + steps 1..6
  CHECK(trim.num_events_dropped == 4);
  CHECK(read_tensorboard_scalars(path).back().step == 6);
  trim = trim_tensorboard_events(dir, 6);
  CHECK(trim.num_files_rewritten == 0);  // nothing after step 6 any more: the file is left alone

  // A damaged file is an error naming the file and where.
  std::ofstream(path, std::ios::binary | std::ios::app) << "garbage";
  CHECK_THROWS_WITH_AS(read_tensorboard_scalars(path), doctest::Contains((path + ": damaged at byte").c_str()), Error);
  CHECK(trim_tensorboard_events(dir, 6).num_damaged_bytes == 7);
  CHECK(read_tensorboard_scalars(path).size() == 6);

  CHECK(trim_tensorboard_events(s.dir + "/no_such_folder", 3).num_files == 0);

  // A fresh run in the same folder: the old event files go, nothing else.
  std::ofstream(dir + "/notes.txt") << "mine";
  { TensorBoardWriter second(dir, 1700000100.0); }
  CHECK(remove_tensorboard_events(dir) == 2);
  CHECK(fs::exists(dir + "/notes.txt"));
  CHECK(remove_tensorboard_events(s.dir + "/no_such_folder") == 0);
}

}  // namespace test_tensorboard_test
