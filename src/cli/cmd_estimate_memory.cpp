// `shardtrain estimate-memory`: the memory per rank of training a model with
// each strategy, before queueing the job (cli/estimate_memory.h). Rank 0
// prints; nothing is allocated but the config.
#include "shardtrain/cli/estimate_memory.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/config_flags.h"
#include "shardtrain/config/config.h"
#include "shardtrain/comm/world.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/enum_names.h"
#include "shardtrain/core/limits.h"
#include "shardtrain/core/log.h"
#include "shardtrain/tasks/task_rules.h"
#include "shardtrain/model/encoder_config.h"
#include "shardtrain/model/lora.h"
#include "shardtrain/train/memory_estimate.h"

namespace fs = std::filesystem;

namespace shardtrain {
namespace {

std::vector<std::string> split_list(const std::string& text) {
  std::string spaced = text;
  for (char& c : spaced)
    if (c == ',') c = ' ';
  std::istringstream words(spaced);
  std::vector<std::string> out;
  for (std::string w; words >> w;) out.push_back(w);
  return out;
}

std::vector<int> parse_world_sizes(const std::optional<std::string>& text) {
  if (!text) return {1, 2, 4, 8};
  // Every item, empty ones included ("1,,2", ""), is a rank count.
  std::vector<int> out;
  std::string item;
  std::istringstream items(*text);
  while (std::getline(items, item, ',')) {
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (item.empty())
      throw Error("--world-size '" + shorten(*text) + "': an empty item (give rank counts, e.g. 1,2,4,8)");
    out.push_back(static_cast<int>(parse_integer_setting("--world-size", item, 1, 1 << 20)));
  }
  if (out.empty() || text->back() == ',')
    throw Error("--world-size '" + shorten(*text) + "': an empty item (give rank counts, e.g. 1,2,4,8)");
  return out;
}

std::vector<StrategyKind> parse_strategies(const std::string& text, const RunConfig& base) {
  std::vector<StrategyKind> out;
  for (const std::string& w : split_list(text)) {
    if (w == "all") {
      for (StrategyKind k : {StrategyKind::kDdp, StrategyKind::kZero1, StrategyKind::kZero2, StrategyKind::kZero3,
                             StrategyKind::kFsdp})
        out.push_back(k);
      if (base.parallel.ranks_per_node > 0) out.push_back(StrategyKind::kHybrid);
      continue;
    }
    out.push_back(parse_enum<StrategyKind>(w, "--strategy"));
  }
  if (out.empty()) throw Error("--strategy: empty list (all, or some of ddp, zero1, zero2, zero3, fsdp, hybrid)");
  return out;
}

// The config.json of --model (a folder or the file), or of the run config's model.
std::string model_json_path(const std::string& model, const RunConfig& base, bool have_config) {
  if (!model.empty()) {
    std::error_code error;
    const fs::path path = fs::is_directory(model, error) ? fs::path(model) / "config.json" : fs::path(model);
    if (!fs::is_regular_file(path, error))
      throw Error("--model: " + path.string() + " does not exist (a Hugging Face model folder or its config.json)");
    return path.string();
  }
  if (!have_config) throw Error("--model is required without --config (a Hugging Face model folder or its config.json)");
  const ModelConfig& m = base.model;
  const bool from_folder = m.init == ModelInit::kPretrained || m.config.empty();
  return from_folder ? (fs::path(m.path) / "config.json").string() : m.config;
}

std::string count_text(int64_t n) {
  return n >= 1000000 ? str_format("%.1f M", static_cast<double>(n) / 1e6) : std::to_string(n);
}

std::string table_row(const MemoryEstimate& e, const std::optional<MemoryVerdict>& verdict) {
  // LoRA: the frozen base, held and gathered, after the trained parameters' states.
  const std::string frozen = e.lora() ? str_format(" %11s %11s", format_bytes(e.frozen_bytes).c_str(),
                                                   format_bytes(e.frozen_gathered_bytes).c_str())
                                      : "";
  std::string row = str_format("%-7s %5d %11s %11s %11s %11s%s %11s %11s %11s %11s %11s", e.strategy.c_str(),
                               e.shard_group, format_bytes(e.param_bytes).c_str(), format_bytes(e.grad_bytes).c_str(),
                               format_bytes(e.optimizer_bytes).c_str(), format_bytes(e.host_bytes).c_str(),
                               frozen.c_str(), format_bytes(e.gathered_bytes).c_str(), format_bytes(e.comm_bytes).c_str(),
                               format_bytes(e.activations_plain.peak_bytes).c_str(),
                               format_bytes(e.activations_checkpointed.peak_bytes).c_str(),
                               format_bytes(e.total_bytes()).c_str());
  if (verdict)
    row += str_format("  %-26s %s", verdict->text().c_str(),
                      verdict->largest_batch == MemoryVerdict::kNoLimitFound
                          ? "no limit found"
                          : std::to_string(verdict->largest_batch).c_str());
  return row;
}

// The run config with the command's flags applied; each flag's range is its
// key's (config/config.h).
RunConfig config_with_flags(const RunConfig& base_config, bool have_config, const EstimateMemoryArgs& args) {
  RunConfig base = base_config;
  if (!have_config) base.run.device = Device::kCuda;
  if (!args.device.empty()) base.run.device = parse_enum<Device>(args.device, "--device");
  if (!args.mixed_precision.empty())
    base.train.mixed_precision = parse_enum<Precision>(args.mixed_precision, "--mixed-precision");
  if (!args.offload_optimizer.empty())
    base.parallel.offload_optimizer = parse_enum<OffloadDevice>(args.offload_optimizer, "--offload-optimizer");
  if (args.batch_size) {
    if (*args.batch_size < 1) throw Error("--batch-size = " + std::to_string(*args.batch_size) + ": must be >= 1");
    base.train.batch_size = *args.batch_size;
  }
  if (args.seq_len) {
    if (*args.seq_len < kMinSequenceLength || *args.seq_len > kMaxSequenceLength)
      throw Error("--seq-len = " + std::to_string(*args.seq_len) + ": must be in [" +
                  std::to_string(kMinSequenceLength) + ", " + std::to_string(kMaxSequenceLength) + "]");
    base.data.max_length = *args.seq_len;
  }
  if (args.num_labels && (*args.num_labels < 1 || *args.num_labels > kMaxNumLabels))
    throw Error("--num-labels = " + std::to_string(*args.num_labels) + ": must be in [1, " +
                std::to_string(kMaxNumLabels) + "]");
  if (args.gradient_checkpointing) base.model.gradient_checkpointing = true;
  if (args.lora_r) {
    if (*args.lora_r < 1) throw Error("--lora-r = " + std::to_string(*args.lora_r) + ": must be >= 1");
    base.lora.r = *args.lora_r;
  }
  if (!args.lora_target_modules.empty()) {
    if (!base.lora.enabled()) throw Error("--lora-target-modules needs --lora-r (or lora.r in --config)");
    base.lora.target_modules = split_list(args.lora_target_modules);
  }
  return base;
}

// What is trained: every parameter, or LoRA's adapters and modules to save.
std::string trained_text(const EncoderConfig& model, const std::optional<LoraSpec>& lora) {
  if (!lora) return count_text(model.num_parameters()) + " trainable parameters";
  int64_t trained = 0;
  for (const ParameterSpec& p : lora_trainable_plan(model, *lora)) trained += p.numel();
  std::string targets, saved;
  for (const std::string& t : lora->target_modules) targets += (targets.empty() ? "" : ",") + t;
  for (const std::string& m : lora->modules_to_save) saved += (saved.empty() ? "" : ",") + m;
  return str_format("LoRA r %lld on %s (modules_to_save %s): %s of %s parameters trained, the frozen base "
                    "parameters only",
                    static_cast<long long>(lora->r), targets.c_str(), saved.empty() ? "none" : saved.c_str(),
                    count_text(trained).c_str(), count_text(model.num_parameters()).c_str());
}

}  // namespace

double parse_memory_size(const std::string& text, const std::string& flag) {
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1},          {"b", 1},          {"k", 1024.0},    {"kib", 1024.0},  {"kb", 1e3},
      {"m", 1048576.0}, {"mib", 1048576.0}, {"mb", 1e6},     {"g", 1073741824.0}, {"gib", 1073741824.0},
      {"gb", 1e9},      {"t", 1099511627776.0}, {"tib", 1099511627776.0}, {"tb", 1e12}};
  try {
    std::string unit;
    const double value = parse_number_setting(flag, text, &unit);  // the config's reading of a number
    for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (value > 0)
      for (const auto& [name, scale] : kUnits)
        if (unit == name && std::isfinite(value * scale)) return value * scale;
  } catch (const Error&) {
    // Said below, with the units.
  }
  throw Error(flag + ": '" + shorten(text) + "' is not a memory size (a positive number with an optional unit: 80GiB, "
              "80GB, 512MiB, 1.5TiB; GB and MB are decimal, GiB and MiB binary)");
}

std::vector<std::string> estimate_memory_report(const RunConfig& base_config, bool have_config,
                                                const EstimateMemoryArgs& args) {
  RunConfig base = config_with_flags(base_config, have_config, args);
  std::optional<double> capacity;
  if (!args.device_memory.empty()) capacity = parse_memory_size(args.device_memory, "--device-memory");
  const std::vector<int> world_sizes = parse_world_sizes(args.world_sizes);
  const std::vector<StrategyKind> strategies = parse_strategies(args.strategies, base);

  const std::string json_path = model_json_path(args.model, base, have_config);
  EncoderConfig model = EncoderConfig::from_file(json_path);
  // The run config's task (its head), else the config.json's architectures.
  if (have_config) model.task = base.model.task;
  // --num-labels, else model.num_labels, else data.labels (token
  // classification), else the labels of the config.json.
  const int64_t num_labels = args.num_labels               ? *args.num_labels
                             : base.model.num_labels > 0   ? base.model.num_labels
                             : !base.data.labels.empty()   ? static_cast<int64_t>(base.data.labels.size())
                                                           : model.num_labels;
  if (num_labels != model.num_labels) model.set_num_labels(num_labels);
  if (base.data.max_length > model.max_sequence_length())
    throw Error(str_format("--seq-len %lld exceeds the %lld positions of %s", static_cast<long long>(base.data.max_length),
                           static_cast<long long>(model.max_sequence_length()), json_path.c_str()));

  // The adapter once, before the table: its errors are the run's, not a row's.
  const std::optional<LoraSpec> lora = run_lora_spec(base, model);
  std::vector<std::string> lines;
  if (!args.json) {
    const int64_t sequences = task_rules(model.task).sequences_per_row(base.data);
    const std::string per_row =
        sequences > 1 ? str_format(" x %lld choices", static_cast<long long>(sequences)) : std::string();
    const std::string trained = trained_text(model, lora);
    lines.push_back(str_format("# %s: %s %s, %s, %lld labels; mixed precision %s; batch %lld%s x "
                               "%lld tokens per rank; device %s%s%s",
                               json_path.c_str(), model.model_type.c_str(), enum_name(model.task),
                               trained.c_str(), static_cast<long long>(num_labels),
                               enum_name(base.train.mixed_precision), static_cast<long long>(base.train.batch_size),
                               per_row.c_str(),
                               static_cast<long long>(base.data.max_length), enum_name(base.run.device),
                               base.parallel.offload_optimizer == OffloadDevice::kCpu ? "; optimizer offload" : "",
                               capacity ? ("; capacity " + format_bytes(*capacity) + " per rank").c_str() : ""));
    lines.push_back("# per rank; group = ranks holding one copy of the sharded state; activations during backward "
                    "(plain / gradient checkpointing); total = states + gathered + comm + the configured activations");
    if (lora)
      lines.push_back("# LoRA: params, grads, optimizer = the trained parameters' (the strategy's); frozen = the "
                      "frozen base held per rank (zero3 / hybrid: a shard), frozen_gath = the most of it gathered "
                      "at once; both in total");
  }
  for (const int n : world_sizes) {
    if (!args.json) {
      lines.push_back(str_format("## %d rank%s", n, n == 1 ? "" : "s"));
      const std::string frozen = lora ? str_format(" %11s %11s", "frozen", "frozen_gath") : "";
      lines.push_back(str_format("%-7s %5s %11s %11s %11s %11s%s %11s %11s %11s %11s %11s%s", "strategy", "group",
                                 "params", "grads", "optimizer", "host", frozen.c_str(), "gathered", "comm", "act_plain",
                                 "act_ckpt", "total", capacity ? "  verdict                    max_batch" : ""));
    }
    for (const StrategyKind kind : strategies) {
      RunConfig run = base;
      run.parallel.strategy = kind;
      if (kind == StrategyKind::kHybrid && run.parallel.ranks_per_node <= 0)
        run.parallel.ranks_per_node = std::max(1, n / 2);
      try {
        const MemoryEstimate e = estimate_memory(run, model, n);
        std::optional<MemoryVerdict> verdict;
        if (capacity) verdict = judge_memory(run, model, n, capacity.value());
        lines.push_back(args.json ? estimate_to_json(e, verdict) : table_row(e, verdict));
      } catch (const Error& error) {
        // A combination the strategies refuse (ddp with offload, hybrid's
        // ranks per node): say why instead of a row, in JSON too.
        if (strategies.size() == 1) throw;
        lines.push_back(args.json ? str_format("{\"strategy\":\"%s\",\"world_size\":%d,\"refused\":%s}",
                                               enum_name(kind), n, nlohmann::json(error.what()).dump().c_str())
                                  : str_format("%-7s  (%s)", enum_name(kind), error.what()));
      }
    }
  }
  return lines;
}

void add_estimate_memory_command(CLI::App& root, World& world) {
  CLI::App* command = root.add_subcommand(
      "estimate-memory", "Estimate the memory per rank of training a model, for each strategy and rank count");
  auto flags = add_config_flags(*command);
  auto args = std::make_shared<EstimateMemoryArgs>();
  command->add_option("--model", args->model, "a Hugging Face model folder or its config.json (default: the run config's)");
  // Numbers as text, read by the config's own reading (config/config.h): CLI11
  // would take "0x10" and leave 0 indistinguishable from "not given".
  auto texts = std::make_shared<std::map<std::string, std::string>>();
  command->add_option("--world-size", (*texts)["--world-size"], "rank counts, e.g. 1,2,4,8 (default 1,2,4,8)");
  command->add_option("--strategy", args->strategies, "all, or a list of ddp, zero1, zero2, zero3, fsdp, hybrid");
  command->add_option("--mixed-precision", args->mixed_precision, "no, bf16 or fp16 (default: the run config's, no)");
  command->add_option("--offload-optimizer", args->offload_optimizer, "cpu or none (moves state only off a GPU)");
  command->add_option("--device", args->device, "cpu or cuda (default: the run config's run.device; cuda without one)");
  command->add_option("--batch-size", (*texts)["--batch-size"], "sequences per rank (default train.batch_size)");
  command->add_option("--seq-len", (*texts)["--seq-len"], "tokens per sequence (default data.max_length)");
  command->add_option("--num-labels", (*texts)["--num-labels"],
                      "classifier labels (default model.num_labels, else the model's config.json)");
  command->add_flag("--gradient-checkpointing", args->gradient_checkpointing, "model.gradient_checkpointing = true");
  command->add_option("--lora-r", (*texts)["--lora-r"],
                      "LoRA's rank (lora.r): only the adapters and the head trained, the base frozen");
  command->add_option("--lora-target-modules", args->lora_target_modules,
                      "with --lora-r: e.g. query,value or all-linear (default: the model type's, as PEFT's)");
  command->add_option("--device-memory", args->device_memory,
                      "memory per rank (GPU, or host share on a CPU), e.g. 80GiB: adds a verdict and the largest batch");
  command->add_flag("--json", args->json, "one JSON object per (strategy, world size)");
  command->callback([flags, args, texts, command, &world]() {
    if (command->count("--world-size")) args->world_sizes = (*texts)["--world-size"];
    for (const auto& [flag, field] : {std::pair<const char*, std::optional<int64_t>*>{"--batch-size", &args->batch_size},
                                      {"--seq-len", &args->seq_len},
                                      {"--num-labels", &args->num_labels},
                                      {"--lora-r", &args->lora_r}})
      if (command->count(flag)) *field = parse_integer_setting(flag, (*texts)[flag]);
    const bool have_config = !flags->file.empty();
    const ConfigOverrides overrides = flags->overrides();
    if (!have_config && !overrides.empty())
      throw Error("--" + overrides.front().first + ": config keys need --config RUN.toml (or use this command's "
                  "own flags: --batch-size, --seq-len, --mixed-precision, ...)");
    const RunConfig base = have_config ? flags->load() : RunConfig();
    const std::vector<std::string> lines = estimate_memory_report(base, have_config, *args);
    if (world.rank() != 0) return;
    for (const std::string& line : lines) std::printf("%s\n", line.c_str());
  });
}

}  // namespace shardtrain
