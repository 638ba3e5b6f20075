// `shardtrain inspect CKPT`: what a training checkpoint holds, without loading
// the weights: progress (step, epoch, sampler position), the job that wrote it,
// the schedule, the metrics of its report, the model and whether optimizer
// state is there. --json prints the same as one JSON object; --config prints
// the resolved run config TOML stored with it; --verify reads every tensor and
// checks it (checkpoint/checkpoint.h's checksums). Rank 0 reads the file alone.
#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <mpi.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "shardtrain/comm/mpi_helpers.h"
#include "shardtrain/checkpoint/checkpoint.h"
#include "shardtrain/comm/world.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"
#include "shardtrain/core/log.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/train/checkpoint_model.h"

namespace shardtrain {
namespace {

struct InspectFlags {
  std::string path;
  bool json = false;
  bool config = false;
  bool verify = false;
};

struct GroupSummary {
  int64_t num_tensors = 0;
  int64_t num_elements = 0;
  int64_t num_bytes = 0;
};

GroupSummary summarize_group(const CheckpointReader& reader, const std::string& group) {
  GroupSummary out;
  for (const std::string& name : reader.names(group)) {
    int64_t numel = 1;
    for (int64_t d : reader.shape(group, name)) numel *= d;
    out.num_tensors += 1;
    out.num_elements += numel;
    out.num_bytes += numel * static_cast<int64_t>(c10::elementSize(reader.dtype(group, name)));
  }
  return out;
}

int64_t count_lines(const std::string& text) {
  int64_t lines = 0;
  for (char c : text) lines += c == '\n';
  if (!text.empty() && text.back() != '\n') ++lines;
  return lines;
}

// Before HDF5 opens it: a folder, a FIFO (opening would block) or a loop of
// symbolic links gets a message naming it.
void require_checkpoint_file(const std::string& path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error))
    throw Error(path + " is a folder; inspect reads a training checkpoint file (checkpoint_<n>.h5)");
  // A missing file is left to the reader ("... does not exist").
  if (std::filesystem::exists(std::filesystem::symlink_status(path, error)))
    require_regular_file(path, "inspect: the checkpoint file");
}

// Everything inspect reports, as the --json object; the text form is printed from it.
nlohmann::json summarize(const std::string& path) {
  require_checkpoint_file(path);
  CheckpointReader reader(path, MPI_COMM_SELF);
  const TrainState state = read_train_state(reader);
  const EncoderConfig config = EncoderConfig::from_json(state.model_config_json, path + " (attribute model_config_json)");

  nlohmann::json metrics;
  try {
    metrics = nlohmann::json::parse(state.metrics_json);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": attribute metrics_json is not JSON: " + e.what());
  }

  const GroupSummary model = summarize_group(reader, "model");
  const bool has_optimizer = reader.has("optim", "exp_avg") && reader.has("optim", "exp_avg_sq");
  GroupSummary exp_avg, exp_avg_sq;
  if (has_optimizer) {
    exp_avg = summarize_group(reader, "optim/exp_avg");
    exp_avg_sq = summarize_group(reader, "optim/exp_avg_sq");
  }

  nlohmann::json out;
  out["path"] = path;
  out["size_bytes"] = static_cast<int64_t>(std::filesystem::file_size(path));
  out["kind"] = kTrainCheckpointKind;
  out["step"] = state.step;
  if (!state.lora_json.empty()) {  // a LoRA adapter: the base's identity beside it
    out["lora"] = nlohmann::json::parse(state.lora_json, nullptr, false);
    out["base_model_path"] = state.base_model_path;
    out["base_model_sha256"] = state.base_model_sha256;
  }
  out["epoch"] = state.epoch;
  out["batches_consumed"] = state.batches_consumed;
  out["seed"] = state.seed;
  out["world_size"] = state.world_size;
  out["global_batch_size"] = state.global_batch_size;
  out["strategy"] = state.strategy;
  out["schedule"] = {{"base_lr", state.base_lr},
                     {"warmup_steps", state.warmup_steps},
                     {"num_training_steps", state.num_training_steps}};
  out["train"] = {{"loss_sum", state.loss_sum},
                  {"loss_count", state.loss_count},
                  {"train_seconds", state.train_seconds}};
  out["metrics"] = metrics;
  out["model"] = {{"model_type", config.model_type},
                  {"architecture", config.architecture()},
                  {"num_hidden_layers", config.num_hidden_layers},
                  {"hidden_size", config.hidden_size},
                  {"num_attention_heads", config.num_attention_heads},
                  {"intermediate_size", config.intermediate_size},
                  {"vocab_size", config.vocab_size},
                  {"max_position_embeddings", config.max_position_embeddings},
                  {"num_labels", config.num_labels},
                  {"id2label", config.id2label},
                  {"num_parameters", model.num_elements},
                  {"parameter_bytes", model.num_bytes},
                  {"num_tensors", model.num_tensors}};
  out["optimizer_state"] = has_optimizer;
  out["optimizer_bytes"] = exp_avg.num_bytes + exp_avg_sq.num_bytes;
  out["num_datasets"] = model.num_tensors + exp_avg.num_tensors + exp_avg_sq.num_tensors;
  if (state.tokenizer_files.empty()) {  // a checkpoint written before tokenizer_files
    out["tokenizer"] = {{"type", "wordpiece"}, {"vocab_size", count_lines(state.vocab_text)},
                        {"lowercase", state.lowercase != 0}};
  } else {
    const Tokenizer tokenizer = checkpoint_tokenizer(state, path);
    std::vector<std::string> files;
    // Named: a range-for over parse(...).items() would iterate a destroyed temporary.
    const nlohmann::json saved = nlohmann::json::parse(state.tokenizer_files);
    for (const auto& item : saved.items()) files.push_back(item.key());
    out["tokenizer"] = {{"type", tokenizer.type()}, {"vocab_size", tokenizer.vocab_size()},
                        {"lowercase", tokenizer.options().lowercase}, {"files", files}};
  }
  out["has_config_toml"] = !state.config_toml.empty();
  return out;
}

// 108311810 -> "108,311,810"
std::string grouped(int64_t value) {
  std::string digits = std::to_string(value < 0 ? -value : value);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(static_cast<size_t>(i), ",");
  return (value < 0 ? "-" : "") + digits;
}

std::string metric_value(const nlohmann::json& value) {
  if (value.is_number_float()) return str_format("%.6g", value.get<double>());
  return value.dump();
}

void print_text(const nlohmann::json& s) {
  const nlohmann::json& m = s["model"];
  auto i64 = [](const nlohmann::json& v) { return static_cast<long long>(v.get<int64_t>()); };
  std::printf("checkpoint:  %s (%s)\n", s["path"].get<std::string>().c_str(), format_bytes(static_cast<double>(s["size_bytes"].get<int64_t>())).c_str());
  std::printf("kind:        %s\n", s["kind"].get<std::string>().c_str());
  std::printf("progress:    step %lld, epoch %lld, %lld batches of the epoch consumed\n", i64(s["step"]),
              i64(s["epoch"]), i64(s["batches_consumed"]));
  std::printf("written by:  %lld ranks, strategy %s, seed %lld, global batch %lld\n", i64(s["world_size"]),
              s["strategy"].get<std::string>().c_str(), i64(s["seed"]), i64(s["global_batch_size"]));
  const nlohmann::json& schedule = s["schedule"];
  std::printf("schedule:    base lr %g, %lld warmup steps, %lld training steps\n", schedule["base_lr"].get<double>(),
              i64(schedule["warmup_steps"]), i64(schedule["num_training_steps"]));
  const nlohmann::json& train = s["train"];
  const int64_t loss_count = train["loss_count"].get<int64_t>();
  if (loss_count > 0)
    std::printf("train:       %.1f s trained; train loss %.6g since the last report (mean of %lld)\n",
                train["train_seconds"].get<double>(), train["loss_sum"].get<double>() / static_cast<double>(loss_count),
                static_cast<long long>(loss_count));
  else
    std::printf("train:       %.1f s trained\n", train["train_seconds"].get<double>());
  std::string metrics;
  if (s["metrics"].is_object()) {
    for (const auto& [key, value] : s["metrics"].items())
      metrics += (metrics.empty() ? "" : ", ") + key + " " + metric_value(value);
  } else {
    metrics = s["metrics"].dump();
  }
  std::printf("metrics:     %s\n", metrics.empty() ? "(none)" : metrics.c_str());
  std::string labels;
  for (const auto& name : m["id2label"]) labels += (labels.empty() ? "" : ", ") + name.get<std::string>();
  std::printf("model:       %s, %lld layers, hidden %lld, %lld heads, intermediate %lld, "
              "vocab %lld, %lld labels (%s)\n",
              m["architecture"].get<std::string>().c_str(), i64(m["num_hidden_layers"]), i64(m["hidden_size"]), i64(m["num_attention_heads"]),
              i64(m["intermediate_size"]), i64(m["vocab_size"]), i64(m["num_labels"]), labels.c_str());
  if (s.contains("lora")) {
    const nlohmann::json& lora = s["lora"];
    std::printf("LoRA:        r %lld, alpha %g, targets %s, modules_to_save %s; base %s (sha256 %s)\n",
                static_cast<long long>(lora.value("r", int64_t{0})), lora.value("lora_alpha", 0.0),
                lora.value("target_modules", nlohmann::json::array()).dump().c_str(),
                lora.value("modules_to_save", nlohmann::json::array()).dump().c_str(),
                s["base_model_path"].get<std::string>().empty() ? "random init"
                                                                : s["base_model_path"].get<std::string>().c_str(),
                s["base_model_sha256"].get<std::string>().c_str());
  }
  std::printf("parameters:  %s in %lld tensors (%s)\n", grouped(m["num_parameters"].get<int64_t>()).c_str(),
              i64(m["num_tensors"]), format_bytes(static_cast<double>(m["parameter_bytes"].get<int64_t>())).c_str());
  if (s["optimizer_state"].get<bool>())
    std::printf("optimizer:   AdamW state present (exp_avg, exp_avg_sq: %s)\n",
                format_bytes(static_cast<double>(s["optimizer_bytes"].get<int64_t>())).c_str());
  else
    std::printf("optimizer:   no optimizer state (model only; a resumed run would restart AdamW)\n");
  const nlohmann::json& tokenizer = s["tokenizer"];
  std::printf("tokenizer:   %s, %lld tokens, lowercase %s\n", tokenizer["type"].get<std::string>().c_str(),
              i64(tokenizer["vocab_size"]), tokenizer["lowercase"].get<bool>() ? "yes" : "no");
  std::printf("datasets:    %lld\n", i64(s["num_datasets"]));
}

// --verify: every dataset read in full against its checksum and for NaNs, every
// attribute against its checksum (a note, not an OK, for a file older than
// attribute checksums), the attributes a training checkpoint needs, and the
// tensors against its model config. Error (exit 2) naming the file and the first problem.
void verify(const std::string& path) {
  require_checkpoint_file(path);
  const CheckpointVerification v = verify_checkpoint(path);
  CheckpointReader reader(path, MPI_COMM_SELF);
  const TrainState state = read_train_state(reader);
  for (const FlatTensor& tensor : checkpoint_flat_tensors(state, path)) {
    if (!reader.has("model", tensor.name))
      throw Error(path + ": the checkpoint has no tensor /model/" + tensor.name + " of its model config");
    if (reader.shape("model", tensor.name) != tensor.shape)
      throw Error(path + ": tensor /model/" + tensor.name + " does not have the shape its model config gives");
  }
  const std::string attributes =
      v.has_attribute_checksums
          ? str_format("%lld attributes match their checksums", static_cast<long long>(v.num_attributes_verified))
          : "attributes without checksums (written by an older shardtrain): the model config, tokenizer, run config "
            "and training state could not be verified";
  // "OK" only when every part could be checked: an older file reads, with a note.
  const bool complete = v.has_checksums && v.has_attribute_checksums;
  std::printf("%s: %s: %lld datasets (%s) read in full, all finite; %s; %s; training state (step %lld) and model "
              "config readable\n",
              path.c_str(), complete ? "OK" : "readable, NOT fully verified", static_cast<long long>(v.num_datasets), format_bytes(static_cast<double>(v.num_bytes)).c_str(),
              v.has_checksums ? str_format("%lld checksums match", static_cast<long long>(v.num_verified)).c_str()
                              : "no checksums (written by an older shardtrain): their content could not be verified",
              attributes.c_str(), static_cast<long long>(state.step));
  std::fflush(stdout);
}

void run_inspect(const World& world, const InspectFlags& flags) {
  on_rank0(world.comm(), "inspect: rank 0 reads " + flags.path, [&] {
    if (flags.verify) {
      verify(flags.path);
      return;
    }
    if (flags.config) {
      require_checkpoint_file(flags.path);
      CheckpointReader reader(flags.path, MPI_COMM_SELF);
      const TrainState state = read_train_state(reader);
      if (state.config_toml.empty()) throw Error(flags.path + ": the checkpoint stores no run config");
      std::fputs(state.config_toml.c_str(), stdout);
      if (state.config_toml.back() != '\n') std::fputc('\n', stdout);
      return;
    }
    const nlohmann::json summary = summarize(flags.path);
    if (flags.json)
      std::printf("%s\n", summary.dump(2).c_str());
    else
      print_text(summary);
    std::fflush(stdout);
  });
}

}  // namespace

void add_inspect_command(CLI::App& root, World& world) {
  auto flags = std::make_shared<InspectFlags>();
  CLI::App* sub = root.add_subcommand(
      "inspect", "Summarise a training checkpoint: progress, schedule, metrics, model, optimizer state");
  sub->add_option("checkpoint", flags->path, "training checkpoint file (checkpoint_<n>.h5)")->required();
  auto* json = sub->add_flag("--json", flags->json, "print the summary as one JSON object");
  auto* config = sub->add_flag("--config", flags->config, "print the resolved run config (TOML) stored in the checkpoint")
                     ->excludes(json);
  sub->add_flag("--verify", flags->verify,
                "read every tensor and check it against its checksum and for NaN/inf, and the training state; "
                "exit 2 naming the first problem")
      ->excludes(json)
      ->excludes(config);
  sub->callback([&world, flags] { run_inspect(world, *flags); });
}

}  // namespace shardtrain
