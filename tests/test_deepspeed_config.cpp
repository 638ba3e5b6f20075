// DeepSpeed JSON configs (parallel.deepspeed_config) -> RunConfig: every
// mapping, every "auto" rule (values computed by hand in the comments), the
// errors a user sees, the [parallel.zero] / FSDP key checks, and that every
// shipped config under configs/ loads.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "shardtrain/cli/config.h"
#include "shardtrain/cli/deepspeed_config.h"
#include "shardtrain/core/check.h"
#include "support/mpi_ranks.h"

namespace test_deepspeed_config_test {

namespace fs = std::filesystem;
using nlohmann::json;
using shardtrain::apply_deepspeed_config;
using shardtrain::ConfigOverrides;
using shardtrain::DeepSpeedContext;
using shardtrain::load_run_config;
using shardtrain::LoadOptions;
using shardtrain::RunConfig;
using namespace shardtrain;  // the choice enums (core/choices.h)
using shardtrain_test::contains;
using shardtrain_test::error_of;

const std::string kSource = SHARDTRAIN_SOURCE_DIR;

// The reference workflow's ZeRO-3 JSON as shipped.
json reference_json() {
  std::ifstream in(kSource + "/configs/deepspeed/zero3_offload.json");
  REQUIRE(in.good());
  return json::parse(in);
}

// A scratch folder: data, vocabulary, a model config.json with a chosen
// hidden_size, and a run config that points at them and at ds.json.
struct DsScratch {
  std::string dir;
  explicit DsScratch(int hidden_size = 768) {
    char pattern[] = "/tmp/shardtrain_dsconfig_XXXXXX";
    dir = mkdtemp(pattern);
    std::ofstream(dir + "/train.tsv") << "Quality\t#1 String\t#2 String\n1\ta\tb\n";
    std::ofstream(dir + "/vocab.txt") << "[PAD]\n[UNK]\n[CLS]\n[SEP]\n";
    std::ofstream(dir + "/bert.json") << json{{"hidden_size", hidden_size}}.dump();
  }
  ~DsScratch() { fs::remove_all(dir); }

  // ds.json holds `ds`; the run config adds `extra` TOML after [model] and [data].
  std::string config(const json& ds, const std::string& extra = "", const std::string& parallel_extra = "") const {
    std::ofstream(dir + "/ds.json") << ds.dump(2);
    const std::string path = dir + "/run.toml";
    std::ofstream(path) << "[model]\ninit = \"random\"\nconfig = \"" << dir << "/bert.json\"\nvocab = \"" << dir
                        << "/vocab.txt\"\n\n[data]\ntrain_file = \"" << dir << "/train.tsv\"\n\n"
                        << extra << "\n[parallel]\ndeepspeed_config = \"" << dir << "/ds.json\"\n"
                        << parallel_extra;
    return path;
  }
};

RunConfig load(const std::string& file, int world_size, std::vector<std::string>* lines = nullptr,
               const ConfigOverrides& overrides = {}) {
  LoadOptions options;
  options.world_size = world_size;
  options.deepspeed_lines = lines;
  return load_run_config(file, overrides, options);
}

bool has_line(const std::vector<std::string>& lines, const std::string& text) {
  for (const auto& line : lines)
    if (contains(line, text)) return true;
  return false;
}

// Number of "  - " items in a problem list.
int count_items(const std::string& message) {
  int n = 0;
  for (size_t at = message.find("\n  - "); at != std::string::npos; at = message.find("\n  - ", at + 1)) ++n;
  return n;
}

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

TEST_CASE("fp16 is refused on a CPU-only build and with run.device = cpu, with a hint") {
  DsScratch s;
  // The reference JSON as is: fp16 on. This build has no CUDA (CI), so load_run_config refuses it.
  const std::string message = error_of([&] { load(s.config(reference_json()), 1); });
  CHECK(contains(message, "fp16.enabled = true: fp16 with loss scaling is a GPU mode"));
  CHECK(contains(message, "On CPU use bf16: \"fp16\": {\"enabled\": false} and \"bf16\": {\"enabled\": true}"));
  CHECK(contains(message, "fp32"));
  CHECK(count_items(message) == 1);

  RunConfig c;
  c.model.config = s.dir + "/bert.json";
  c.model.init = ModelInit::kRandom;
  s.config(reference_json());
  c.parallel.deepspeed_config = s.dir + "/ds.json";
  DeepSpeedContext context;
  context.cuda_build = true;  // a CUDA build, but run.device = Device::kCpu
  CHECK(contains(error_of([&] { RunConfig copy = c; apply_deepspeed_config(copy, context); }),
                 "run.device is \"cpu\""));
  c.run.device = Device::kCuda;  // a CUDA build on GPUs: fp16 is taken, with DeepSpeed's loss scaling
  RunConfig copy = c;
  const DeepSpeedResolution resolved = apply_deepspeed_config(copy, context);
  CHECK(copy.train.mixed_precision == Precision::kFp16);
  CHECK(copy.train.fp16.loss_scale == 0);  // dynamic
  CHECK(copy.train.fp16.initial_scale_power == 16);
  CHECK(copy.train.fp16.loss_scale_window == 1000);
  CHECK(copy.train.fp16.hysteresis == 2);
  CHECK(copy.train.fp16.min_loss_scale == 1);
  CHECK_FALSE(copy.train.fp16.consecutive_hysteresis);
  std::string printed;
  for (const auto& l : resolved.lines) printed += l + "\n";
  for (const char* line : {"fp16.loss_scale = (absent) -> train.fp16.loss_scale = 0 (DeepSpeed's default)",
                           "fp16.loss_scale_window = (absent) -> train.fp16.loss_scale_window = 1000 (DeepSpeed's default)",
                           "fp16.hysteresis = (absent) -> train.fp16.hysteresis = 2 (DeepSpeed's default)",
                           "fp16.min_loss_scale = (absent) -> train.fp16.min_loss_scale = 1 (DeepSpeed's default)",
                           "-> train.mixed_precision = \"fp16\"",
                           "parallel.strategy = \"zero3\"", "parallel.offload_optimizer = \"cpu\""}) {
    CAPTURE(line);
    CHECK(contains(printed, line));
  }
  // The JSON's own values win over DeepSpeed's defaults; one that contradicts a
  // key the run config sets names both.
  json custom = reference_json();
  custom["fp16"] = {{"enabled", true}, {"loss_scale", 0}, {"initial_scale_power", 12}, {"hysteresis", 4},
                    {"consecutive_hysteresis", true}, {"min_loss_scale", 0.25}};
  s.config(custom);
  RunConfig tuned = c;
  apply_deepspeed_config(tuned, context);
  CHECK(tuned.train.fp16.initial_scale_power == 12);
  CHECK(tuned.train.fp16.hysteresis == 4);
  CHECK(tuned.train.fp16.consecutive_hysteresis);
  CHECK(tuned.train.fp16.min_loss_scale == 0.25);
  custom["fp16"]["master_weights_in_fp32"] = true;
  s.config(custom);
  CHECK(contains(error_of([&] { RunConfig again = c; apply_deepspeed_config(again, context); }),
                 "fp16.master_weights_in_fp32 = true: not implemented"));
  s.config(reference_json());
  context.cuda_build = false;
  CHECK(contains(error_of([&] { RunConfig again = c; apply_deepspeed_config(again, context); }),
                 "this build of shardtrain has no CUDA"));
}

TEST_CASE("fp16 / bf16: numbers, \"auto\" from train.mixed_precision, both on is an error") {
  DsScratch s;
  json ds = {{"zero_optimization", {{"stage", 1}}}, {"bf16", {{"enabled", true}}}};
  CHECK(load(s.config(ds), 1).train.mixed_precision == Precision::kBf16);
  ds["bf16"]["enabled"] = "auto";
  CHECK(load(s.config(ds, "[train]\nmixed_precision = \"bf16\"\n"), 1).train.mixed_precision == Precision::kBf16);
  CHECK(load(s.config(ds), 1).train.mixed_precision == Precision::kNo);
  ds["bf16"]["enabled"] = false;
  ds["fp16"] = {{"enabled", false}};
  CHECK(load(s.config(ds), 1).train.mixed_precision == Precision::kNo);
  ds["bf16"]["enabled"] = true;
  ds["fp16"]["enabled"] = true;
  CHECK(contains(error_of([&] { load(s.config(ds), 1); }), "both enabled"));
  // A bf16 JSON against an explicit train.mixed_precision = Precision::kNo: both keys named.
  ds["fp16"]["enabled"] = false;
  const std::string message = error_of([&] { load(s.config(ds, "[train]\nmixed_precision = \"no\"\n"), 1); });
  CHECK(contains(message, "train.mixed_precision = \"bf16\" but the run config sets train.mixed_precision = \"no\""));
}

TEST_CASE("zero_optimization.stage chooses the strategy; stage-specific keys") {
  DsScratch s;
  const StrategyKind expected[] = {StrategyKind::kDdp, StrategyKind::kZero1, StrategyKind::kZero2, StrategyKind::kZero3};
  for (int stage = 0; stage <= 3; ++stage)
    CHECK(load(s.config({{"zero_optimization", {{"stage", stage}}}}), 1).parallel.strategy == expected[stage]);
  CHECK(load(s.config(json::object()), 1).parallel.strategy == StrategyKind::kDdp);  // absent: DeepSpeed's stage 0
  CHECK(contains(error_of([&] { load(s.config({{"zero_optimization", {{"stage", 4}}}}), 1); }),
                 "zero_optimization.stage = 4: ZeRO stages are 0, 1, 2 and 3"));
  CHECK(contains(error_of([&] {
                   load(s.config({{"zero_optimization", {{"stage", 0}, {"offload_optimizer", {{"device", "cpu"}}}}}}),
                        1);
                 }),
                 "optimizer offload needs ZeRO stage 1, 2 or 3"));

  // Stage 2: the ZeRO knobs are taken; stage-3-only keys are reported as unused, not applied.
  std::vector<std::string> lines;
  const RunConfig c =
      load(s.config({{"zero_optimization",
                      {{"stage", 2},
                       {"overlap_comm", false},
                       {"contiguous_gradients", false},
                       {"reduce_bucket_size", 2e8},
                       {"allgather_bucket_size", 123456},
                       {"round_robin_gradients", true},
                       {"stage3_prefetch_bucket_size", "auto"},
                       {"stage3_gather_16bit_weights_on_model_save", true}}}}),
           1, &lines);
  CHECK(c.parallel.strategy == StrategyKind::kZero2);
  CHECK_FALSE(c.parallel.zero.overlap_comm);
  CHECK_FALSE(c.parallel.zero.contiguous_gradients);
  CHECK(c.parallel.zero.reduce_bucket_size == 200000000);  // 2e8 written as a float is an integer
  CHECK(c.parallel.zero.allgather_bucket_size == 123456);
  CHECK(c.parallel.zero.round_robin_gradients);
  CHECK(c.parallel.zero.stage3_prefetch_bucket_size == shardtrain::ZeroConfig().stage3_prefetch_bucket_size);
  CHECK_FALSE(c.parallel.zero.gather_16bit_weights_on_model_save);
  CHECK(has_line(lines, "stage3_prefetch_bucket_size = \"auto\" -> not used below stage 3"));
  CHECK(has_line(lines, "stage3_gather_16bit_weights_on_model_save = true -> not used below stage 3"));

  // Absent knobs get DeepSpeed's defaults: overlap_comm false below stage 3, true at stage 3.
  CHECK_FALSE(load(s.config({{"zero_optimization", {{"stage", 1}}}}), 1).parallel.zero.overlap_comm);
  const RunConfig three = load(s.config({{"zero_optimization", {{"stage", 3}}}}), 1);
  CHECK(three.parallel.zero.overlap_comm);
  CHECK(three.parallel.zero.reduce_bucket_size == 500000000);
  CHECK(three.parallel.zero.stage3_prefetch_bucket_size == 50000000);
  CHECK(three.parallel.zero.stage3_param_persistence_threshold == 100000);
  CHECK(three.parallel.offload_optimizer == OffloadDevice::kNone);

  // DeepSpeed's other spellings of the stage-3 keys.
  const RunConfig aliases = load(s.config({{"zero_optimization",
                                            {{"stage", 3},
                                             {"prefetch_bucket_size", 1000},
                                             {"param_persistence_threshold", 10},
                                             {"stage3_gather_fp16_weights_on_model_save", true}}}}),
                                 1);
  CHECK(aliases.parallel.zero.stage3_prefetch_bucket_size == 1000);
  CHECK(aliases.parallel.zero.stage3_param_persistence_threshold == 10);
  CHECK(aliases.parallel.zero.gather_16bit_weights_on_model_save);
  // "auto": Accelerate's false.
  CHECK_FALSE(load(s.config({{"zero_optimization", {{"stage", 3}, {"stage3_gather_16bit_weights_on_model_save", "auto"}}}}),
                   1)
                  .parallel.zero.gather_16bit_weights_on_model_save);
}

TEST_CASE("batch sizes: numbers override, train_batch_size must be micro x accumulation x world size") {
  DsScratch s;
  json ds = {{"zero_optimization", {{"stage", 2}}},
             {"train_micro_batch_size_per_gpu", 8},
             {"gradient_accumulation_steps", 4},
             {"train_batch_size", 64}};
  RunConfig c = load(s.config(ds), 2);  // 8 x 4 x 2 = 64
  CHECK(c.train.batch_size == 8);
  CHECK(c.train.gradient_accumulation_steps == 4);

  ds["train_batch_size"] = 60;
  const std::string message = error_of([&] { load(s.config(ds), 2); });
  CHECK(contains(message, "train_batch_size = 60: must equal train_micro_batch_size_per_gpu (8) x "
                          "gradient_accumulation_steps (4) x world size (2) = 64"));
  // 128 = 8 x 4 x 4: right for 4 ranks, wrong for 2.
  ds["train_batch_size"] = 128;
  CHECK(load(s.config(ds), 4).train.batch_size == 8);
  CHECK(contains(error_of([&] { load(s.config(ds), 2); }), "= 64"));

  // DeepSpeed derives an absent one from train_batch_size: 96 / (8 x 3 ranks) = 4 steps.
  json derive = {{"train_micro_batch_size_per_gpu", 8}, {"train_batch_size", 96}};
  CHECK(load(s.config(derive), 3).train.gradient_accumulation_steps == 4);
  // 96 / (2 steps x 3 ranks) = 16 per rank.
  derive = {{"gradient_accumulation_steps", 2}, {"train_batch_size", 96}};
  CHECK(load(s.config(derive), 3).train.batch_size == 16);
  // Only train_batch_size: accumulation 1, micro 96 / 3 = 32.
  derive = {{"train_batch_size", 96}};
  c = load(s.config(derive), 3);
  CHECK(c.train.batch_size == 32);
  CHECK(c.train.gradient_accumulation_steps == 1);
  derive = {{"train_micro_batch_size_per_gpu", 7}, {"train_batch_size", 96}};
  CHECK(contains(error_of([&] { load(s.config(derive), 3); }), "96 is not divisible by 21"));

  // "auto" takes the run config's values; an absent accumulation is 1 (DeepSpeed, Accelerate).
  json automatic = {{"train_micro_batch_size_per_gpu", "auto"}, {"gradient_accumulation_steps", "auto"}};
  c = load(s.config(automatic, "[train]\nbatch_size = 5\ngradient_accumulation_steps = 3\n"), 2);
  CHECK(c.train.batch_size == 5);
  CHECK(c.train.gradient_accumulation_steps == 3);
  CHECK(load(s.config({{"train_micro_batch_size_per_gpu", 4}}), 2).train.gradient_accumulation_steps == 1);

  // A number that contradicts a key the user set: both named (transformers refuses this too).
  const std::string conflict = error_of([&] { load(s.config(ds, "[train]\nbatch_size = 16\n"), 4); });
  CHECK(contains(conflict, "train_micro_batch_size_per_gpu = 8: means train.batch_size = 8 but the run config sets "
                           "train.batch_size = 16"));
  // ... also from the command line.
  CHECK(contains(error_of([&] { load(s.config(ds), 4, nullptr, {{"train.gradient_accumulation_steps", "2"}}); }),
                 "the run config sets train.gradient_accumulation_steps = 2"));
  // The same value set in both places is fine.
  CHECK(load(s.config(ds, "[train]\nbatch_size = 8\n"), 4).train.batch_size == 8);
}

TEST_CASE("gradient_clipping: number, true, \"auto\", absent") {
  DsScratch s;
  CHECK(load(s.config({{"gradient_clipping", 0.5}}), 1).train.max_grad_norm == 0.5);
  CHECK(load(s.config({{"gradient_clipping", true}}), 1).train.max_grad_norm == 1.0);  // DeepSpeed reads true as 1.0
  CHECK(load(s.config({{"gradient_clipping", "auto"}}, "[train]\nmax_grad_norm = 2.5\n"), 1).train.max_grad_norm ==
        2.5);
  CHECK(load(s.config(json::object()), 1).train.max_grad_norm == 0.0);  // absent: DeepSpeed does not clip
  CHECK(contains(error_of([&] { load(s.config({{"gradient_clipping", -1}}), 1); }),
                 "gradient_clipping = -1: expected a number >= 0"));
}

TEST_CASE("activation_checkpointing turns on model.gradient_checkpointing; its knobs are named") {
  DsScratch s;
  CHECK_FALSE(load(s.config(json::object()), 1).model.gradient_checkpointing);
  std::vector<std::string> lines;
  const json section = {{"partition_activations", true},          {"cpu_checkpointing", false},
                        {"contiguous_memory_optimization", false}, {"number_checkpoints", nullptr},
                        {"synchronize_checkpoint_boundary", false}, {"profile", false}};
  CHECK(load(s.config({{"activation_checkpointing", section}}), 1, &lines).model.gradient_checkpointing);
  CHECK(has_line(lines, "-> model.gradient_checkpointing = true"));
  CHECK(has_line(lines, "activation_checkpointing.partition_activations = true -> accepted, no effect"));
  CHECK(has_line(lines, "activation_checkpointing.number_checkpoints = null -> accepted, no effect"));
  // The run config saying otherwise is a contradiction, named with both keys.
  CHECK(contains(error_of([&] {
                   load(s.config({{"activation_checkpointing", json::object()}}), 1, nullptr,
                        {{"model.gradient_checkpointing", "false"}});
                 }),
                 "activation_checkpointing = {}: means model.gradient_checkpointing = true but the run config sets "
                 "model.gradient_checkpointing = false"));
  CHECK(contains(error_of([&] { load(s.config({{"activation_checkpointing", {{"profile", true}}}}), 1); }),
                 "activation_checkpointing.profile = true: DeepSpeed's checkpointing profiler is not implemented"));
  CHECK(contains(error_of([&] { load(s.config({{"activation_checkpointing", {{"partition", true}}}}), 1); }),
                 "activation_checkpointing.partition = true: not a DeepSpeed activation_checkpointing key"));
}

TEST_CASE("optimizer: AdamW params as numbers, \"auto\" and DeepSpeed's defaults") {
  DsScratch s;
  json ds = {{"optimizer",
              {{"type", "AdamW"},
               {"params", {{"lr", 3e-5}, {"betas", {0.8, 0.99}}, {"eps", 1e-6}, {"weight_decay", 0.1}}}}}};
  RunConfig c = load(s.config(ds), 1);
  CHECK(c.train.lr == 3e-5);
  CHECK(c.train.adam_beta1 == 0.8);
  CHECK(c.train.adam_beta2 == 0.99);
  CHECK(c.train.adam_epsilon == 1e-6);
  CHECK(c.train.weight_decay == 0.1);

  ds["optimizer"]["params"] = {{"lr", "auto"}, {"betas", "auto"}, {"eps", "auto"}, {"weight_decay", "auto"}};
  c = load(s.config(ds, "[train]\nlr = 4e-5\nadam_beta2 = 0.98\nweight_decay = 0.02\n"), 1);
  CHECK(c.train.lr == 4e-5);
  CHECK(c.train.adam_beta1 == 0.9);
  CHECK(c.train.adam_beta2 == 0.98);
  CHECK(c.train.adam_epsilon == 1e-8);
  CHECK(c.train.weight_decay == 0.02);

  // Absent params: DeepSpeed's optimizer defaults (FusedAdam / DeepSpeedCPUAdam: lr 1e-3,
  // weight_decay 0; torch.optim.AdamW with torch_adam: weight_decay 0.01).
  ds["optimizer"] = {{"type", "Adam"}};
  c = load(s.config(ds), 1);
  CHECK(c.train.lr == 1e-3);
  CHECK(c.train.weight_decay == 0.0);
  ds["optimizer"]["params"] = {{"torch_adam", true}, {"adam_w_mode", true}};
  CHECK(load(s.config(ds), 1).train.weight_decay == 0.01);

  ds["optimizer"]["params"] = {{"adam_w_mode", false}};
  CHECK(contains(error_of([&] { load(s.config(ds), 1); }), "Adam with L2 regularisation is not implemented"));
  ds["optimizer"] = {{"type", "Lamb"}};
  CHECK(contains(error_of([&] { load(s.config(ds), 1); }), "optimizer.type = \"Lamb\": only \"AdamW\""));
}

TEST_CASE("scheduler: the type and its params map to train.lr_scheduler_type and _kwargs") {
  DsScratch s;
  json ds = {{"scheduler",
              {{"type", "WarmupDecayLR"},
               {"params",
                {{"warmup_min_lr", 0},
                 {"warmup_max_lr", 5e-5},
                 {"warmup_num_steps", 50},
                 {"warmup_type", "linear"},
                 {"total_num_steps", "auto"}}}}}};
  std::vector<std::string> lines;
  RunConfig c = load(s.config(ds), 1, &lines);
  CHECK(c.train.lr_scheduler_type == shardtrain::LrSchedulerType::kWarmupDecayLR);
  CHECK(c.train.warmup_steps == 50);
  CHECK(c.train.warmup_ratio == 0.0);
  CHECK(c.train.lr == 5e-5);
  CHECK(c.train.lr_scheduler_kwargs.warmup_type == shardtrain::WarmupType::kLinear);
  CHECK(c.train.lr_scheduler_kwargs.total_num_steps == 0);  // the run's steps
  CHECK(has_line(lines, "scheduler.params.total_num_steps = \"auto\" -> the run's total optimizer steps"));

  // "auto" as transformers fills it: warmup_min_lr 0, warmup_max_lr train.lr, warmup_num_steps the run's warmup.
  ds["scheduler"]["params"] = {{"warmup_min_lr", "auto"},
                               {"warmup_max_lr", "auto"},
                               {"warmup_num_steps", "auto"},
                               {"warmup_type", "linear"},
                               {"total_num_steps", "auto"}};
  c = load(s.config(ds, "[train]\nwarmup_ratio = 0.1\nlr = 1e-4\n"), 1);
  CHECK(c.train.warmup_ratio == 0.1);
  CHECK(c.train.warmup_steps == 0);
  CHECK(c.train.lr == 1e-4);
  CHECK(c.train.lr_scheduler_kwargs.warmup_min_lr == 0.0);

  // Absent params take DeepSpeed's defaults: warmup_max_lr 0.001, warmup_num_steps 1000, warmup_type "log".
  lines.clear();
  c = load(s.config(json{{"scheduler", {{"type", "WarmupLR"}}}}), 1, &lines);
  CHECK(c.train.lr_scheduler_type == shardtrain::LrSchedulerType::kWarmupLR);
  CHECK(c.train.lr == 0.001);
  CHECK(c.train.warmup_steps == 1000);
  CHECK(c.train.lr_scheduler_kwargs.warmup_type == shardtrain::WarmupType::kLog);
  CHECK(has_line(lines, "scheduler.params.warmup_max_lr = (absent) -> train.lr = 0.001 (DeepSpeed's default)"));

  // WarmupCosineLR scales the optimizer's lr; a fixed total_num_steps is kept.
  ds = {{"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 3e-4}}}}},
        {"scheduler",
         {{"type", "WarmupCosineLR"},
          {"params",
           {{"total_num_steps", 1000}, {"warmup_num_steps", 20}, {"warmup_min_ratio", 0.1}, {"cos_min_ratio", 0.01}}}}}};
  c = load(s.config(ds), 1);
  CHECK(c.train.lr_scheduler_type == shardtrain::LrSchedulerType::kWarmupCosineLR);
  CHECK(c.train.lr == 3e-4);
  CHECK(c.train.warmup_steps == 20);
  CHECK(c.train.lr_scheduler_kwargs.total_num_steps == 1000);
  CHECK(c.train.lr_scheduler_kwargs.warmup_min_ratio == 0.1);
  CHECK(c.train.lr_scheduler_kwargs.cos_min_ratio == 0.01);
  CHECK(c.train.lr_scheduler_kwargs.warmup_type == shardtrain::WarmupType::kLog);

  // The resolved config reads back without the JSON deciding twice.
  const std::string toml = shardtrain::config_to_toml(c);
  CHECK(contains(toml, "[train.lr_scheduler_kwargs]\n"));
  CHECK(contains(toml, "total_num_steps = 1000\n"));

  // warmup_max_lr against a different optimizer lr: DeepSpeed would silently use warmup_max_lr.
  ds = {{"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-5}}}}},
        {"scheduler", {{"type", "WarmupLR"}, {"params", {{"warmup_max_lr", 2e-5}}}}}};
  CHECK(contains(error_of([&] { load(s.config(ds), 1); }), "differs from optimizer.params.lr = 1e-05"));
  ds["scheduler"]["params"] = json::object();  // absent: DeepSpeed's 0.001, the same trap
  CHECK(contains(error_of([&] { load(s.config(ds), 1); }),
                 "scheduler.params.warmup_max_lr (absent): means train.lr = 0.001 (DeepSpeed's default), which "
                 "differs from optimizer.params.lr = 1e-05"));
  // A run-config key the JSON contradicts names both.
  CHECK(contains(error_of([&] { load(s.config(json{{"scheduler", {{"type", "WarmupLR"}}}},
                                                  "[train]\nlr_scheduler_type = \"cosine\"\n"), 1); }),
                 "means train.lr_scheduler_type = \"WarmupLR\" but the run config sets train.lr_scheduler_type = "
                 "\"cosine\""));
}

TEST_CASE("scheduler: what DeepSpeed would refuse or shardtrain does not implement") {
  DsScratch s;
  const json ds = {{"scheduler",
                    {{"type", "WarmupCosineLR"},
                     {"params", {{"warmup_max_lr", 1e-4}, {"warmup_type", "exp"}, {"last_batch_iteration", 10}}}}}};
  const std::string message = error_of([&] { load(s.config(ds), 1); });
  CHECK(count_items(message) == 4);
  CHECK(contains(message, "scheduler.params.warmup_max_lr = 0.0001: not a WarmupCosineLR parameter (it has "
                          "warmup_num_steps, warmup_type, total_num_steps, warmup_min_ratio, cos_min_ratio, "
                          "last_batch_iteration)"));
  CHECK(contains(message, "scheduler.params.warmup_type = \"exp\": expected \"log\" or \"linear\""));
  CHECK(contains(message, "scheduler.params.total_num_steps (absent): WarmupCosineLR needs it"));
  CHECK(contains(message, "scheduler.params.last_batch_iteration = 10: only -1 is implemented"));
  CHECK(contains(error_of([&] { load(s.config(json{{"scheduler", {{"type", "OneCycle"}}}}), 1); }),
                 "scheduler.type = \"OneCycle\": not implemented"));
  CHECK(contains(error_of([&] { load(s.config(json{{"scheduler", {{"type", "cosine"}}}}), 1); }),
                 "scheduler.type = \"cosine\": expected \"WarmupLR\", \"WarmupDecayLR\" or \"WarmupCosineLR\""));
}

TEST_CASE("every key that is not implemented is named, all in one message") {
  DsScratch s;
  const json ds = {
      {"zero_optimization",
       {{"stage", 3},
        {"offload_param", {{"device", "cpu"}, {"pin_memory", true}}},
        {"stage3_max_live_parameters", 1e9},
        {"sub_group_size", 1e9}}},
      {"activation_checkpointing", {{"cpu_checkpointing", true}}},
      {"wall_clock_breakdown", true},
      {"fp16", {{"enabled", false}}},
      {"scheduler", {{"type", "OneCycle"}, {"params", {{"cycle_max_lr", 1e-4}}}}},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 2e-5}, {"amsgrad", true}}}}},
  };
  const std::string message = error_of([&] { load(s.config(ds), 1); });
  CHECK(contains(message, "7 keys need changing:"));
  CHECK(count_items(message) == 7);
  CHECK(contains(message, "zero_optimization.offload_param.device = \"cpu\": parameter offload is not implemented"));
  CHECK(contains(message, "zero_optimization.stage3_max_live_parameters = 1000000000.0: not implemented"));
  CHECK(contains(message, "zero_optimization.sub_group_size"));
  CHECK(contains(message, "activation_checkpointing.cpu_checkpointing = true: keeping checkpointed activations in "
                          "host memory is not implemented"));
  CHECK(contains(message, "wall_clock_breakdown = true"));
  CHECK(contains(message, "scheduler.type = \"OneCycle\": not implemented"));
  CHECK(contains(message, "optimizer.params.amsgrad = true"));
}

TEST_CASE("\"auto\" bucket sizes need the model's hidden_size") {
  DsScratch s;
  std::ofstream(s.dir + "/bert.json") << "{\"num_hidden_layers\": 2}";
  const json ds = {{"zero_optimization", {{"stage", 3}, {"reduce_bucket_size", "auto"}}}};
  const std::string message = error_of([&] { load(s.config(ds), 1); });
  CHECK(contains(message, "zero_optimization.reduce_bucket_size = \"auto\""));
  CHECK(contains(message, "bert.json' has no positive integer \"hidden_size\""));
  // A model with "hidden_sizes" (Accelerate takes the largest).
  std::ofstream(s.dir + "/bert.json") << "{\"hidden_sizes\": [64, 256, 128]}";
  CHECK(load(s.config(ds), 1).parallel.zero.reduce_bucket_size == 256 * 256);
  // Not valid JSON, not an object: the file is named.
  const RunConfig c = load(s.config(ds), 1);
  std::ofstream(s.dir + "/broken.json") << "{\"zero_optimization\": ";
  RunConfig broken = c;
  broken.parallel.deepspeed_config = s.dir + "/broken.json";
  CHECK(contains(error_of([&] { apply_deepspeed_config(broken, DeepSpeedContext()); }), "broken.json': not valid JSON"));
}

TEST_CASE("a run config printed after a DeepSpeed JSON loads back to the same values") {
  DsScratch s;
  json ds = reference_json();
  ds["fp16"]["enabled"] = false;
  const RunConfig c = load(s.config(ds), 2);
  const std::string printed = shardtrain::config_to_toml(c);
  std::ofstream(s.dir + "/printed.toml") << printed;
  const RunConfig again = load(s.dir + "/printed.toml", 2);
  CHECK(shardtrain::config_to_toml(again) == printed);
  // ... but changing one of the JSON's values there is a contradiction that names both.
  CHECK(contains(error_of([&] { load(s.dir + "/printed.toml", 2, nullptr, {{"parallel.zero.overlap_comm", "false"}}); }),
                 "zero_optimization.overlap_comm = true: means parallel.zero.overlap_comm = true but the run config "
                 "sets parallel.zero.overlap_comm = false"));
}

// ---- [parallel.zero] and FSDP keys in TOML -----------------------------------

struct TomlScratch {
  std::string dir;
  TomlScratch() {
    char pattern[] = "/tmp/shardtrain_zerokeys_XXXXXX";
    dir = mkdtemp(pattern);
    std::ofstream(dir + "/train.tsv") << "Quality\t#1 String\t#2 String\n1\ta\tb\n";
    std::ofstream(dir + "/vocab.txt") << "[PAD]\n[UNK]\n[CLS]\n[SEP]\n";
    std::ofstream(dir + "/bert.json") << "{}";
  }
  ~TomlScratch() { fs::remove_all(dir); }
  std::string config(const std::string& parallel) const {
    const std::string path = dir + "/run.toml";
    std::ofstream(path) << "[model]\ninit = \"random\"\nconfig = \"" << dir << "/bert.json\"\nvocab = \"" << dir
                        << "/vocab.txt\"\n[data]\ntrain_file = \"" << dir << "/train.tsv\"\n"
                        << parallel;
    return path;
  }
  std::string error(const std::string& parallel) const {
    return error_of([&] { load_run_config(config(parallel), {}); });
  }
};

TEST_CASE("[parallel.zero] keys are read and checked against the strategy") {
  TomlScratch t;
  const RunConfig c = load_run_config(
      t.config("[parallel]\nstrategy = \"zero3\"\noffload_optimizer = \"cpu\"\n[parallel.zero]\noverlap_comm = false\n"
               "reduce_bucket_size = 1000\nallgather_bucket_size = 2000\ncontiguous_gradients = false\n"
               "round_robin_gradients = true\nstage3_prefetch_bucket_size = 3000\n"
               "stage3_param_persistence_threshold = 4000\ngather_16bit_weights_on_model_save = true\n"),
      {});
  CHECK(c.parallel.offload_optimizer == OffloadDevice::kCpu);
  CHECK_FALSE(c.parallel.zero.overlap_comm);
  CHECK(c.parallel.zero.reduce_bucket_size == 1000);
  CHECK(c.parallel.zero.allgather_bucket_size == 2000);
  CHECK_FALSE(c.parallel.zero.contiguous_gradients);
  CHECK(c.parallel.zero.round_robin_gradients);
  CHECK(c.parallel.zero.stage3_prefetch_bucket_size == 3000);
  CHECK(c.parallel.zero.stage3_param_persistence_threshold == 4000);
  CHECK(c.parallel.zero.gather_16bit_weights_on_model_save);

  CHECK(t.error("[parallel]\nstrategy = \"ddp\"\n[parallel.zero]\noverlap_comm = false\n") ==
        "parallel.zero.overlap_comm only applies when parallel.strategy is \"zero1\", \"zero2\", \"zero3\" or "
        "\"hybrid\" (it is \"ddp\")");
  CHECK(contains(t.error("[parallel]\nstrategy = \"fsdp\"\n[parallel.zero]\nreduce_bucket_size = 5\n"),
                 "for fsdp use parallel.fsdp.*"));
  CHECK(contains(t.error("[parallel]\nstrategy = \"zero2\"\n[parallel.zero]\nstage3_prefetch_bucket_size = 5\n"),
                 "parallel.zero.stage3_prefetch_bucket_size only applies when parallel.strategy is \"zero3\" or "
                 "\"hybrid\""));
  CHECK(contains(t.error("[parallel]\nstrategy = \"zero1\"\n[parallel.zero]\ngather_16bit_weights_on_model_save = "
                         "true\n"),
                 "parallel.zero.gather_16bit_weights_on_model_save only applies"));
  CHECK(t.error("[parallel]\nstrategy = \"zero2\"\nbucket_cap_mb = 50.0\n[parallel.zero]\nreduce_bucket_size = 5\n") ==
        "parallel.zero.reduce_bucket_size and parallel.bucket_cap_mb are both set (two sizes for the gradient "
        "buckets); keep one");
  CHECK(t.error("[parallel]\nstrategy = \"zero3\"\n[parallel.zero]\nstage3_prefetch_bucket_size = -1\n") ==
        "parallel.zero.stage3_prefetch_bucket_size = -1: must be >= 0");
  CHECK(contains(t.error("[parallel]\nstrategy = \"zero3\"\n[parallel.zero]\nreduce_bucket_size = 1.5\n"),
                 "parallel.zero.reduce_bucket_size: expected an integer, got 1.5"));
  // hybrid shards parameters too.
  CHECK(t.error("[parallel]\nstrategy = \"hybrid\"\n[parallel.zero]\nstage3_param_persistence_threshold = 7\n") ==
        "(no error)");
}

TEST_CASE("FSDP prefetch keys: choices, and only with strategy fsdp") {
  TomlScratch t;
  const RunConfig c = load_run_config(
      t.config("[parallel]\nstrategy = \"fsdp\"\n[parallel.fsdp]\nbackward_prefetch = \"BACKWARD_POST\"\n"
               "forward_prefetch = true\nsharding_strategy = \"SHARD_GRAD_OP\"\nstate_dict_type = "
               "\"SHARDED_STATE_DICT\"\noffload_to_cpu = false\nrank0_only = false\n"),
      {});
  CHECK(c.parallel.fsdp.backward_prefetch == BackwardPrefetch::kBackwardPost);
  CHECK(c.parallel.fsdp.forward_prefetch);
  CHECK(c.parallel.fsdp.sharding_strategy == FsdpShardingStrategy::kShardGradOp);
  CHECK(c.parallel.fsdp.state_dict_type == FsdpStateDictType::kShardedStateDict);
  CHECK_FALSE(c.parallel.fsdp.offload_to_cpu);
  CHECK_FALSE(c.parallel.fsdp.rank0_only);
  CHECK(contains(t.error("[parallel]\nstrategy = \"fsdp\"\n[parallel.fsdp]\nbackward_prefetch = \"PRE\"\n"),
                 "allowed values are \"BACKWARD_PRE\", \"BACKWARD_POST\", \"NO_PREFETCH\""));
  CHECK(t.error("[parallel]\nstrategy = \"zero3\"\n[parallel.fsdp]\nforward_prefetch = true\n") ==
        "parallel.fsdp.forward_prefetch only applies when parallel.strategy = \"fsdp\" (it is \"zero3\")");
}

TEST_CASE("every shipped config under configs/ loads") {
  // Shipped configs name files relative to the project root, as users run them.
  const fs::path previous = fs::current_path();
  fs::current_path(kSource);
  std::vector<std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator("configs"))
    if (entry.is_regular_file() && entry.path().extension() == ".toml") files.push_back(entry.path().string());
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

}  // namespace test_deepspeed_config_test
