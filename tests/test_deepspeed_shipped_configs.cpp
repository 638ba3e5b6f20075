// The shipped DeepSpeed JSONs and run configs: the reference workflow's ZeRO-3
// JSON resolves as Accelerate would (values computed by hand in the comments),
// its fp32 copy loads with the tiny model, and every config under configs/ loads.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "support/deepspeed_fixtures.h"

namespace test_deepspeed_shipped_configs_test {

namespace fs = std::filesystem;
using namespace shardtrain_test::deepspeed_tests;  // DsScratch, load, ..., and shardtrain's names

const std::string kSource = SHARDTRAIN_SOURCE_DIR;

TEST_CASE("the reference ZeRO-3 JSON (fp16 off) resolves as Accelerate would") {
  DsScratch s(768);  // bert-base-cased: hidden_size 768
  json ds = reference_json();
  ds["fp16"]["enabled"] = false;
  std::vector<std::string> lines;
  const RunConfig c = load(s.config(ds, "[train]\nbatch_size = 16\ngradient_accumulation_steps = 2\n"), 4, &lines);

  CHECK(c.parallel.strategy == StrategyKind::kZero3);          // stage 3
  CHECK(c.parallel.offload_optimizer == OffloadDevice::kCpu);   // offload_optimizer.device
  CHECK(c.parallel.zero.overlap_comm);
  CHECK(c.parallel.zero.contiguous_gradients);
  CHECK(c.parallel.zero.round_robin_gradients);
  CHECK(c.parallel.zero.gather_16bit_weights_on_model_save);
  // "auto" with H = 768: reduce_bucket_size = H*H = 589824;
  // stage3_prefetch_bucket_size = int(0.9 * 589824) = int(530841.6) = 530841;
  // stage3_param_persistence_threshold = 10 * H = 7680.
  CHECK(c.parallel.zero.reduce_bucket_size == 589824);
  CHECK(c.parallel.zero.stage3_prefetch_bucket_size == 530841);
  CHECK(c.parallel.zero.stage3_param_persistence_threshold == 7680);
  // allgather_bucket_size is absent: DeepSpeed's default 5e8.
  CHECK(c.parallel.zero.allgather_bucket_size == 500000000);
  // "auto" batch values from the run: micro 16, accumulation 2; train_batch_size = 16 x 2 x 4 ranks = 128.
  CHECK(c.train.batch_size == 16);
  CHECK(c.train.gradient_accumulation_steps == 2);
  CHECK(has_line(lines, "train_batch_size = \"auto\" -> 128 (16 per rank x 2 accumulation steps x 4 ranks)"));
  CHECK(c.train.max_grad_norm == 1.0);  // gradient_clipping "auto": the run's (default 1.0)
  CHECK(c.train.mixed_precision == Precision::kNo);
  CHECK(c.train.log_every_steps == 10);  // steps_per_print
  CHECK(c.parallel.deepspeed_config == s.dir + "/ds.json");  // kept, so the saved config records it
  CHECK(has_line(lines, "reduce_bucket_size = \"auto\" -> parallel.zero.reduce_bucket_size = 589824"));
  CHECK(has_line(lines, "stage3_prefetch_bucket_size = \"auto\" -> parallel.zero.stage3_prefetch_bucket_size = 530841"));
  CHECK(has_line(lines, "stage3_param_persistence_threshold = \"auto\" -> "
                        "parallel.zero.stage3_param_persistence_threshold = 7680"));
  for (const auto& line : lines) CHECK(line.rfind("deepspeed: ", 0) == 0);
}

TEST_CASE("the shipped fp32 copy of the reference JSON loads with the tiny model (H = 128)") {
  // configs/strategies/deepspeed_zero3.toml uses it with configs/models/bert_tiny.json:
  // 128*128 = 16384, int(0.9*16384) = int(14745.6) = 14745, 10*128 = 1280.
  const fs::path previous = fs::current_path();
  fs::current_path(kSource);
  RunConfig c;
  const std::string error = error_of([&] { c = load("configs/strategies/deepspeed_zero3.toml", 2); });
  fs::current_path(previous);
  REQUIRE(error == "(no error)");
  CHECK(c.parallel.strategy == StrategyKind::kZero3);
  CHECK(c.parallel.zero.reduce_bucket_size == 16384);
  CHECK(c.parallel.zero.stage3_prefetch_bucket_size == 14745);
  CHECK(c.parallel.zero.stage3_param_persistence_threshold == 1280);
  // Both shipped JSONs differ only in fp16.enabled.
  std::ifstream in(kSource + "/configs/deepspeed/zero3_offload_fp32.json");
  json fp32 = json::parse(in);
  json reference = reference_json();
  CHECK(fp32["fp16"]["enabled"] == false);
  fp32["fp16"]["enabled"] = true;
  CHECK(fp32 == reference);
}

// A sweep file ([sweep], docs/sweeps.md) is no run config: the sweep tests load it.
bool is_sweep_file(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("[sweep", 0) == 0) return true;
  return false;
}

TEST_CASE("every shipped config under configs/ loads") {
  // Shipped configs name files relative to the project root, as users run them.
  const fs::path previous = fs::current_path();
  fs::current_path(kSource);
  std::vector<std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator("configs"))
    if (entry.is_regular_file() && entry.path().extension() == ".toml" && !is_sweep_file(entry.path().string()))
      files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  std::vector<std::pair<std::string, std::string>> results;
  for (const auto& file : files) {
    std::string error = error_of([&] { load(file, 4); });
    // A config for downloaded weights (model.path outside the repository): check
    // everything else with the shipped tiny model in its place.
    if (contains(error, "model.path = ") && contains(error, "no such directory"))
      error = error_of([&] {
        load(file, 4, nullptr,
             {{"model.path", ""},
              {"model.init", "random"},
              {"model.config", "configs/models/bert_tiny.json"},
              {"model.vocab", "data/vocab/bert-base-cased-vocab.txt"}});
      });
    results.emplace_back(file, error);
  }
  fs::current_path(previous);
  CHECK(files.size() >= 9);  // quickstart, mrpc_bert_base, 7 under strategies/
  for (const auto& [file, error] : results) {
    INFO(file);
    CHECK(error == "(no error)");
  }
  // One config per strategy.
  for (const char* name : {"ddp", "zero1", "zero2", "zero3", "fsdp", "hybrid"})
    CHECK(std::find(files.begin(), files.end(), std::string("configs/strategies/") + name + ".toml") != files.end());
}

}  // namespace test_deepspeed_shipped_configs_test
