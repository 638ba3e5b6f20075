// `shardtrain export CKPT --output DIR`: the model of a training checkpoint as
// a HF folder (config.json, model.safetensors, vocab.txt, tokenizer_config.json)
// that transformers' from_pretrained and `shardtrain predict` load. A LoRA
// checkpoint becomes a PEFT adapter folder (adapter_config.json,
// adapter_model.safetensors; model/peft_adapter.h), or with --merge a HF
// folder of the base with the adapter merged. Rank 0
// alone reads the checkpoint and streams model.safetensors tensor by tensor
// (export_checkpoint_safetensors); the other ranks wait. A non-empty DIR
// is refused unless --force, and even then only the exported files are
// replaced and the tokenizer files it does not write removed; every file goes
// through core/fs_util.h's writer.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "shardtrain/comm/mpi_helpers.h"
#include "shardtrain/comm/world.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/text.h"
#include "shardtrain/data/tokenizer.h"
#include "shardtrain/model/hf_folder.h"
#include "shardtrain/model/onnx_export.h"
#include "shardtrain/model/peft_adapter.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/train/checkpoint_model.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;

struct ExportFlags {
  std::string checkpoint;
  std::string output;
  std::string dtype = "float32";
  bool force = false;
  bool merge = false;  // LoRA checkpoints: the base with the adapter folded in, as a HF folder
  std::string base;    // LoRA checkpoints: the base's folder instead of the recorded one
  std::string format = "hf";  // hf, or onnx (model/onnx_export.h)
  int64_t opset = 17;
};

bool is_tokenizer_file_name(const std::string& name) {
  const std::vector<std::string>& names = Tokenizer::folder_file_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

at::ScalarType parse_dtype(const std::string& name) {
  if (name == "float32" || name == "fp32") return at::kFloat;
  if (name == "float16" || name == "fp16") return at::kHalf;
  if (name == "bfloat16" || name == "bf16") return at::kBFloat16;
  throw Error("--dtype '" + name + "': expected float32, float16 or bfloat16");
}

// Checked before the (possibly long) checkpoint read, on rank 0.
void check_paths(const ExportFlags& flags) {
  refuse_link_loop(flags.checkpoint, "checkpoint");
  refuse_link_loop(flags.output, "--output");
  if (fs::is_directory(flags.checkpoint))
    throw Error(flags.checkpoint + " is a folder; export reads a training checkpoint file (checkpoint_<n>.h5)");
  if (!fs::exists(flags.checkpoint)) throw Error("checkpoint " + flags.checkpoint + " does not exist");
  if (!is_checkpoint_file(flags.checkpoint))
    throw Error(flags.checkpoint + " is not an HDF5 file (not a shardtrain training checkpoint)");
  // The checkpoint is never replaced, nor its folder (a run folder) written into.
  if (fs::path(real_path(flags.checkpoint)).parent_path() == fs::path(real_path(flags.output)))
    throw Error("--output '" + flags.output + "' is the folder that holds the checkpoint " + flags.checkpoint +
                "; export into a folder of its own (nothing was written)");
  std::vector<std::string> targets = Tokenizer::folder_file_names();
  targets.insert(targets.end(), {"config.json", "model.safetensors", "adapter_config.json", "adapter_model.safetensors"});
  for (const std::string& name : targets)
    refuse_output_over_input("--output", (fs::path(flags.output) / name).string(), "checkpoint", flags.checkpoint);
  std::error_code error;
  if (fs::exists(flags.output, error) && !fs::is_directory(flags.output, error))
    throw Error("--output '" + flags.output + "' exists and is not a folder");
  if (fs::is_directory(flags.output, error) && !fs::is_empty(flags.output, error) && !flags.force)
    throw Error("--output '" + flags.output +
                "' is not empty; refusing to write into it (pass --force to replace config.json, "
                "model.safetensors, the tokenizer's files (vocab.txt, tokenizer.json, vocab.json + merges.txt or a "
                "SentencePiece model) and tokenizer_config.json there, and remove the other tokenizer files an earlier "
                "export left (special_tokens_map.json, ...); other files are kept)");
}

// The checkpoint's tokenizer files (train/checkpoint_model.h), or, for a
// checkpoint written before they were saved, its vocab.txt; tokenizer_config.json
// gets model_max_length and tokenizer_class when it lacks them. Returns the
// names written.
std::vector<std::string> write_tokenizer_files(const fs::path& folder, const std::string& checkpoint,
                                               const CheckpointExport& exported) {
  nlohmann::json config = nlohmann::json::object();
  std::vector<std::string> written;
  const char* tokenizer_class = "BertTokenizer";
  if (exported.state.tokenizer_files.empty()) {
    write_file_atomic((folder / "vocab.txt").string(), exported.state.vocab_text);
    written.push_back("vocab.txt");
    config["do_lower_case"] = exported.state.lowercase != 0;
  } else {
    // Binary files (a SentencePiece model) are stored base64 (data/tokenizer.h).
    const std::map<std::string, std::string> files =
        Tokenizer::saved_file_contents(exported.state.tokenizer_files, checkpoint + " (attribute tokenizer_files)");
    for (const auto& [name, bytes] : files) {
      // A name from the file: one of the tokenizer files --force clears (and
      // so a plain file name, never a path out of the folder).
      if (!is_tokenizer_file_name(name))
        throw Error(checkpoint + ": attribute tokenizer_files names a file '" + clip_for_message(name, 60) +
                    "', which is not a tokenizer file; the checkpoint is damaged");
      if (name == "tokenizer_config.json") {
        config = nlohmann::json::parse(bytes);
        continue;
      }
      write_file_atomic((folder / name).string(), bytes);
      written.push_back(name);
    }
    if (files.count("tokenizer.json") != 0) tokenizer_class = "PreTrainedTokenizerFast";
    if (files.count("vocab.json") != 0) tokenizer_class = "RobertaTokenizer";
  }
  // RoBERTa's positions start after padding_idx: 514 positions hold 512 tokens.
  if (!config.contains("model_max_length")) config["model_max_length"] = exported.config.max_sequence_length();
  if (!config.contains("tokenizer_class")) config["tokenizer_class"] = tokenizer_class;
  write_file_atomic((folder / "tokenizer_config.json").string(), config.dump(2) + "\n");
  written.push_back("tokenizer_config.json");
  return written;
}

// Removes those of `names` that exist in `folder` (files of an earlier
// export under --force); returns the names removed.
std::vector<std::string> remove_from_folder(const fs::path& folder, const std::vector<std::string>& names) {
  std::vector<std::string> removed;
  for (const std::string& name : names) {
    std::error_code error;
    const fs::path path = folder / name;
    if (!fs::exists(fs::symlink_status(path, error))) continue;
    if (!fs::remove(path, error) || error)
      throw Error("--output '" + folder.string() + "': cannot remove " + name + " of an earlier export (" +
                  error.message() + "); remove it, or export into an empty folder");
    removed.push_back(name);
  }
  return removed;
}

// After a --force export: the tokenizer files of an earlier export that this
// one did not write (all of data/tokenizer.h's folder_file_names: a
// vocab.txt or special_tokens_map.json left there would be read beside the
// new tokenizer's files, or instead of them). Returns the names removed.
std::vector<std::string> remove_other_tokenizer_files(const fs::path& folder, const std::vector<std::string>& written) {
  std::vector<std::string> others;
  for (const std::string& name : Tokenizer::folder_file_names())
    if (std::find(written.begin(), written.end(), name) == written.end()) others.push_back(name);
  return remove_from_folder(folder, others);
}

// Files of an earlier export (under --force) that this one's layout does not
// have and a reader would take instead of it; removed, and said.
void remove_earlier_files(const fs::path& folder, const std::vector<std::string>& names) {
  for (const std::string& name : remove_from_folder(folder, names))
    log_info("export: removed %s of an earlier export from %s", name.c_str(), folder.string().c_str());
}


// --format onnx: model.onnx (model/onnx_export.h), config.json and the
// tokenizer's files, as optimum's export folder holds them. The input is a
// training checkpoint (a LoRA one merged) or a HF folder.
void run_onnx_export(const World& world, const ExportFlags& flags) {
#if !defined(SHARDTRAIN_HAVE_ONNX)
  throw Error("--format onnx: this shardtrain was built without Debian's libonnx-dev; install it (bash "
              "scripts/setup.sh installs it) and build again");
#else
  at::ScalarType dtype = at::kFloat;
  with_flag_names([&] { dtype = parse_dtype(flags.dtype); });
  if (dtype == at::kBFloat16)
    throw Error("--dtype " + flags.dtype + ": the ONNX export writes float32 or float16 graphs (ONNX Runtime's CPU "
                "build has few bfloat16 kernels)");
  if (flags.merge)
    throw Error("--merge: --format onnx always merges a LoRA checkpoint's adapter into the graph; leave --merge out");
  if (!flags.base.empty() && !is_checkpoint_file(flags.checkpoint))
    throw Error("--base: " + flags.checkpoint + " is not a LoRA checkpoint (a HF folder holds its whole model)");
  on_rank0(world.comm(), "export: checking the paths", [&] {
    refuse_link_loop(flags.checkpoint, "checkpoint");
    refuse_link_loop(flags.output, "--output");
    if (!fs::exists(flags.checkpoint)) throw Error("--format onnx: " + flags.checkpoint + " does not exist");
    for (const char* name : {"model.onnx", "model.onnx_data", "config.json"})
      refuse_output_over_input("--output", (fs::path(flags.output) / name).string(), "model", flags.checkpoint);
    if (fs::is_directory(flags.checkpoint) && fs::equivalent(flags.checkpoint, flags.output))
      throw Error("--output '" + flags.output + "' is the model folder itself; export into a folder of its own");
    std::error_code error;
    if (fs::exists(flags.output, error) && !fs::is_directory(flags.output, error))
      throw Error("--output '" + flags.output + "' exists and is not a folder");
    if (fs::is_directory(flags.output, error) && !fs::is_empty(flags.output, error) && !flags.force)
      throw Error("--output '" + flags.output + "' is not empty; refusing to write into it (pass --force to replace "
                  "model.onnx, config.json and the tokenizer's files there)");
  });
  OnnxExport exported;
  std::vector<std::string> tokenizer_files;
  on_rank0(world.comm(), "export: rank 0 writes " + flags.output, [&] {
    std::shared_ptr<TaskModel> model;
    CheckpointExport info;
    const bool checkpoint = is_checkpoint_file(flags.checkpoint);
    if (checkpoint) {
      CheckpointModel loaded = load_checkpoint_model(flags.checkpoint, MPI_COMM_SELF, flags.base);
      if (loaded.model->lora()) loaded.model->merge_lora();
      model = loaded.model;
      info.state = loaded.state;
      info.config = loaded.config;
    } else {
      model = load_hf_folder(flags.checkpoint).model;
    }
    check_onnx_exportable(model->config());
    const fs::path folder(flags.output);
    std::error_code error;
    fs::create_directories(folder, error);
    if (error) throw Error(flags.output + ": cannot create output folder: " + error.message());
    OnnxExportOptions options;
    options.opset = flags.opset;
    options.float16 = dtype == at::kHalf;
    exported = export_onnx(*model, (folder / "model.onnx").string(), options);
    if (!exported.external_data) remove_earlier_files(folder, {"model.onnx_data"});
    write_file_atomic((folder / "config.json").string(),
                      hf_config_json(checkpoint ? info.config : model->config(), dtype));
    if (checkpoint) {
      tokenizer_files = write_tokenizer_files(folder, flags.checkpoint, info);
    } else {
      for (const std::string& name : Tokenizer::folder_file_names())
        if (fs::is_regular_file(fs::path(flags.checkpoint) / name)) {
          write_file_atomic((folder / name).string(), read_file((fs::path(flags.checkpoint) / name).string(), name));
          tokenizer_files.push_back(name);
        }
    }
  });
  std::string inputs, outputs;
  for (const std::string& n : exported.inputs) inputs += (inputs.empty() ? "" : ", ") + n;
  for (const std::string& n : exported.outputs) outputs += (outputs.empty() ? "" : ", ") + n;
  log_info("export: %s -> %s/model.onnx (%s, opset %lld, %lld nodes, %lld initializers, %.2f MB%s; inputs %s; outputs %s), "
           "config.json%s%s",
           flags.checkpoint.c_str(), flags.output.c_str(), dtype == at::kHalf ? "float16, float32 outputs" : "float32",
           static_cast<long long>(flags.opset),
           static_cast<long long>(exported.nodes), static_cast<long long>(exported.initializers),
           exported.file_bytes / 1e6, exported.external_data ? ", weights in model.onnx_data" : "", inputs.c_str(),
           outputs.c_str(), tokenizer_files.empty() ? "; no tokenizer files (the source folder has none)" : ", ",
           join_names(tokenizer_files).c_str());
#endif
}

void run_export(const World& world, const ExportFlags& flags) {
  if (flags.format == "onnx") return run_onnx_export(world, flags);
  if (flags.format != "hf") throw Error("--format '" + flags.format + "': expected hf or onnx");
  at::ScalarType dtype = at::kFloat;
  with_flag_names([&] { dtype = parse_dtype(flags.dtype); });
  on_rank0(world.comm(), "export: checking the paths", [&] { check_paths(flags); });

  // Rank 0 alone streams the weights, one tensor at a time; the model is never
  // built, so no rank holds more than one tensor (train/checkpoint_model.h).
  CheckpointExport exported;
  std::vector<std::string> tokenizer_files, removed;
  on_rank0(world.comm(), "export: rank 0 writes " + flags.output, [&] {
    const fs::path folder(flags.output);
    std::error_code error;
    fs::create_directories(folder, error);
    if (error) throw Error(flags.output + ": cannot create output folder: " + error.message());
    TrainState state;
    {
      CheckpointReader reader(flags.checkpoint, MPI_COMM_SELF);
      state = read_train_state(reader);
    }
    if (state.lora_json.empty()) {
      if (flags.merge)
        throw Error("--merge: " + flags.checkpoint + " is not a LoRA checkpoint (it holds the whole model already)");
      if (!flags.base.empty())
        throw Error("--base: " + flags.checkpoint + " is not a LoRA checkpoint (it holds the whole model)");
      // The weights first: export_checkpoint_safetensors checks the tensors
      // against the checkpoint's config before it writes, so a mismatched
      // checkpoint leaves no file behind.
      exported = export_checkpoint_safetensors(flags.checkpoint, (folder / "model.safetensors").string(), dtype);
      write_file_atomic((folder / "config.json").string(), hf_config_json(exported.config, dtype));
      remove_earlier_files(folder, {"adapter_config.json", "adapter_model.safetensors"});
    } else {
      // A LoRA checkpoint: the base loaded (its identity checked), the adapter read.
      CheckpointModel loaded = load_checkpoint_model(flags.checkpoint, MPI_COMM_SELF, flags.base);
      exported.state = loaded.state;
      exported.config = loaded.config;
      for (const auto& [name, tensor] : loaded.model->state_dict()) {
        exported.model_bytes += tensor.numel() * 4;
        ++exported.tensors;
      }
      if (flags.merge) {
        loaded.model->merge_lora();
        HfSaveOptions save;
        save.dtype = dtype;
        save_hf_folder(*loaded.model, folder.string(), save);
      } else {
        const std::string base = flags.base.empty() ? loaded.state.base_model_path : real_path(flags.base);
        write_peft_adapter(folder.string(), *loaded.model, base, dtype);
      }
      // --force over an earlier export of the other layout: transformers reads
      // adapter_config.json before model.safetensors, predict the reverse.
      remove_earlier_files(folder, flags.merge ? std::vector<std::string>{"adapter_config.json", "adapter_model.safetensors"}
                                               : std::vector<std::string>{"config.json", "model.safetensors"});
    }
    tokenizer_files = write_tokenizer_files(folder, flags.checkpoint, exported);
    removed = remove_other_tokenizer_files(folder, tokenizer_files);
  });
  if (!removed.empty())
    log_info("export: removed %s of an earlier export from %s (tokenizer files this export does not write)",
             join_names(removed).c_str(), flags.output.c_str());
  if (!exported.state.lora_json.empty()) {
    log_info("export: LoRA checkpoint %s (step %lld) -> %s (%s as %s, %s); %lld adapter and head tensors (%.2f MB in "
             "fp32)",
             flags.checkpoint.c_str(), static_cast<long long>(exported.state.step), flags.output.c_str(),
             flags.merge ? "the base with the adapter merged: config.json, model.safetensors"
                         : "a PEFT adapter: adapter_config.json, adapter_model.safetensors",
             flags.dtype.c_str(), join_names(tokenizer_files).c_str(), static_cast<long long>(exported.tensors),
             exported.model_bytes / 1e6);
    return;
  }
  log_info("export: %s (step %lld, epoch %lld) -> %s (config.json, model.safetensors as %s, %s); streamed %lld tensors, at most %.2f MB held at once (model %.2f MB)",
           flags.checkpoint.c_str(), static_cast<long long>(exported.state.step),
           static_cast<long long>(exported.state.epoch), flags.output.c_str(), flags.dtype.c_str(),
           join_names(tokenizer_files).c_str(),
           static_cast<long long>(exported.tensors), exported.peak_bytes_held / 1e6, exported.model_bytes / 1e6);
}

}  // namespace

void add_export_command(CLI::App& root, World& world) {
  auto flags = std::make_shared<ExportFlags>();
  CLI::App* sub = root.add_subcommand(
      "export", "Write the model of a training checkpoint as a HF folder (config.json, model.safetensors, vocab.txt)");
  sub->add_option("checkpoint", flags->checkpoint,
                  "training checkpoint file (checkpoint_<n>.h5); with --format onnx also a HF model folder")
      ->required();
  sub->add_option("--format", flags->format,
                  "hf: a Hugging Face folder (a LoRA checkpoint: a PEFT adapter folder); onnx: model.onnx, config.json "
                  "and the tokenizer's files, as optimum exports them")
      ->capture_default_str();
  sub->add_option("--opset", flags->opset, "--format onnx: the ONNX opset, 14 to 17")->capture_default_str();
  sub->add_option("--output", flags->output, "HF folder to write (created if needed; must be empty without --force)")
      ->required();
  sub->add_option("--dtype", flags->dtype,
                  "dtype of the saved weights: float32, float16 or bfloat16 (--format onnx: float32 or float16, "
                  "whose graph has float32 outputs)")
      ->capture_default_str();
  sub->add_flag("--merge", flags->merge,
                "LoRA checkpoints: write the base with the adapter folded in (W + scaling B A) as a whole HF folder, "
                "instead of a PEFT adapter folder");
  sub->add_option("--base", flags->base,
                  "LoRA checkpoints: the base model's folder, when it is no longer where the run read it (its "
                  "sha256 is checked)");
  sub->add_flag("--force", flags->force,
                "write into a non-empty --output folder, replacing the exported files and removing other tokenizer "
                "files (special_tokens_map.json, ...); other files are kept");
  sub->callback([&world, flags] { run_export(world, *flags); });
}

}  // namespace shardtrain
