// `shardtrain predict`: run a HF model folder (or the model of a training
// checkpoint) over a data file, sharded over the ranks, and write one JSON line
// per input row (rank 0, through core/fs_util.h's OutputFile; "-" is standard
// output). With a label column it also prints the
// metrics the training loop reports.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "shardtrain/comm/mpi_helpers.h"
#include "shardtrain/config/config.h"
#include "shardtrain/predict/predict_settings.h"
#include "shardtrain/comm/world.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/tasks/task_rules.h"
#include "shardtrain/train/checkpoint_model.h"
#include "shardtrain/predict/predict.h"

namespace shardtrain {
namespace {

struct PredictFlags {
  PredictOptions options;
  std::string dtype = "float32";
  std::string format = "auto";
  std::string on_bad_row = "error";
  std::string preset = "none";
  std::string output;
  std::string predictions_json;  // question answering: "" = predictions.json beside --output
  std::set<std::string> given;    // the flags on the command line ("--max-length")
};

// The run folder a checkpoint sits in (config.toml, progress.csv, ... beside
// it), or "" for a checkpoint elsewhere and a HF folder.
std::string checkpoint_run_folder(const std::string& model) {
  if (!is_checkpoint_file(model)) return "";
  const std::filesystem::path folder = std::filesystem::path(model).parent_path();
  const std::filesystem::path dir = folder.empty() ? std::filesystem::path(".") : folder;
  std::error_code error;
  for (const char* name : {"config.toml", "progress.csv", "result.jsonl", "train.log"})
    if (std::filesystem::exists(dir / name, error)) return dir.string();
  return "";
}

void check_output_path(const PredictFlags& flags) {
  require_output_named("--output", flags.output);
  if (flags.output == "-") return;  // standard output (core/fs_util.h's OutputFile)
  const std::filesystem::path output(flags.output);
  std::error_code error;
  (void)std::filesystem::status(output, error);
  if (error == std::errc::too_many_symbolic_link_levels)
    throw Error("--output '" + flags.output + "' is a loop of symbolic links; name a file");
  if (same_file(flags.output, flags.options.data_path))
    throw Error("--output '" + flags.output + "' is the input file; choose another name");
  // The model too: a checkpoint file, or any file of a HF folder; and any file
  // of a checkpoint's run folder (its other checkpoints, config.toml, ...).
  refuse_output_over_input("--output", flags.output, "--model", flags.options.model_dir);
  const std::string run_folder = checkpoint_run_folder(flags.options.model_dir);
  if (!run_folder.empty()) refuse_output_in_run_folder("--output", flags.output, run_folder);
  if (is_checkpoint_file(flags.output))
    throw Error("--output '" + flags.output + "' is a training checkpoint; predictions never replace one (choose "
                "another name)");
  if (std::filesystem::is_directory(output, error)) throw Error("--output '" + flags.output + "' is a directory");
  const std::filesystem::path parent = output.has_parent_path() ? output.parent_path() : ".";
  if (!std::filesystem::is_directory(parent, error))
    throw Error("--output '" + flags.output + "': folder '" + parent.string() + "' does not exist");
}

// The files the task writes beside --output (predictions.json, ...), and
// where: checked before anything is written, as --output is.
std::vector<std::pair<std::string, std::string>> side_paths(const PredictFlags& flags, const PredictOptions& options,
                                                              const std::vector<std::string>& names) {
  std::vector<std::pair<std::string, std::string>> paths;  // {name, path}
  for (const std::string& name : names) {
    const bool moved = name == "predictions.json" && !flags.predictions_json.empty();
    const std::string path = moved ? flags.predictions_json : file_beside(flags.output, name);
    const std::string flag = moved ? "--predictions-json" : name + " (beside --output)";
    if (path.empty()) {
      log_warn("predict: --output - (standard output) has no folder to put %s in; give --predictions-json FILE for "
               "the official script's file", name.c_str());
      continue;
    }
    if (flags.output != "-" && same_file(path, flags.output))
      throw Error(flag + " '" + path + "' is also --output; name --output otherwise (or set --predictions-json)");
    if (same_file(path, options.data_path)) throw Error(flag + " '" + path + "' is the input file");
    refuse_output_over_input(flag, path, "--model", options.model_dir);
    const std::string run_folder = checkpoint_run_folder(options.model_dir);
    if (!run_folder.empty()) refuse_output_in_run_folder(flag, path, run_folder);
    std::error_code error;
    if (std::filesystem::is_directory(path, error)) throw Error(flag + " '" + path + "' is a folder; name a file");
    const std::filesystem::path file(path);
    const std::filesystem::path parent = file.has_parent_path() ? file.parent_path() : std::filesystem::path(".");
    if (!std::filesystem::is_directory(parent, error))
      throw Error(flag + " '" + path + "': folder '" + parent.string() + "' does not exist");
    paths.emplace_back(name, path);
  }
  return paths;
}

void run_predict(const World& world, PredictFlags& flags) {
  PredictOptions& options = flags.options;
  DataConfig& data = options.data;
  with_flag_names([&] {
    data.format = parse_file_format(flags.format);
    data.on_bad_row = parse_bad_row_policy(flags.on_bad_row);
    data.preset = parse_enum<DataPreset>(flags.preset, "--preset");
  });
  if (flags.dtype == "float32") options.dtype = at::kFloat;
  else if (flags.dtype == "bfloat16") options.dtype = at::kBFloat16;
  else if (flags.dtype == "float16") options.dtype = at::kHalf;
  else throw Error("--dtype '" + flags.dtype + "': use float32, bfloat16 or float16");
  check_output_path(flags);
  world.log_binding();

  std::optional<PredictModel> model;
  with_flag_names([&] { model.emplace(load_predict_model(options, world.comm())); });
  std::optional<RunConfig> run;
  if (!model->run_config_toml.empty()) {
    try {
      run = parse_saved_run_config(model->run_config_toml, options.model_dir);
    } catch (const Error& e) {
      log_warn("predict: %s; predict's own defaults apply to the settings not given as flags", e.what());
    }
  }
  const at::ScalarType loaded_dtype = options.dtype;
  std::vector<PredictSetting> settings;
  with_flag_names([&] {
    settings = resolve_predict_settings(run ? &*run : nullptr, model->config.task, flags.given, options);
  });
  if (options.dtype != loaded_dtype) model->model->to(options.dtype);
  log_info("predict settings: %s", describe_predict_settings(settings).c_str());
  const std::string report = model->report.message();
  if (!report.empty()) {
    // Predictions from an untrained head are noise: say so loudly, but let the
    // user look at them (HF does the same).
    log_warn("WARNING: %s does not hold all weights of the classifier; predictions use random weights.\n%s",
             options.model_dir.c_str(), report.c_str());
  }
  std::vector<std::pair<std::string, std::string>> beside;
  with_flag_names([&] { beside = side_paths(flags, options, task_rules(model->config.task).side_file_names(data)); });
  PredictResult result;
  with_flag_names([&] { result = predict_file(options, *model, world.comm()); });
  if (result.num_bad_rows > 0)
    log_warn("predict: skipped %lld bad rows of %s (--on-bad-row skip)", static_cast<long long>(result.num_bad_rows),
             options.data_path.c_str());

  on_rank0(world.comm(), "predict: rank 0 writes " + flags.output, [&] {
    write_predictions(*result.predictions, result.num_rows, flags.output, "--output");
    for (const auto& [name, content] : result.predictions->side_files())
      for (const auto& [wanted, path] : beside)
        if (wanted == name) {
          OutputFile out(path, name);
          out.write(content);
          out.commit();
        }
  });
  std::string written = flags.output;
  for (const auto& [name, path] : beside) written += ", " + path;
  log_info("predict: %lld rows (%lld sequences or windows) on %d ranks in %.3f s (%.1f rows/s, batch %lld per rank) "
           "-> %s",
           static_cast<long long>(result.num_rows), static_cast<long long>(result.num_examples), result.world_size,
           result.seconds, result.seconds > 0 ? static_cast<double>(result.num_rows) / result.seconds : 0.0,
           static_cast<long long>(options.batch_size), written.c_str());
  if (!result.metrics().empty()) {
    std::string line;
    for (const auto& [name, value] : result.metrics()) line += str_format(" %s %.4f", name.c_str(), value);
    log_info("eval:%s (%lld rows)", line.c_str(), static_cast<long long>(result.num_rows));
  }
}

}  // namespace

void add_predict_command(CLI::App& root, World& world) {
  auto flags = std::make_shared<PredictFlags>();
  PredictOptions& o = flags->options;
  DataConfig& d = o.data;
  CLI::App* sub = root.add_subcommand(
      "predict",
      "Run a HF model folder or training checkpoint over a data file (sharded over the ranks); one JSON line per row. "
      "On a checkpoint the settings not given are its run's");
  sub->add_option("--model", o.model_dir,
                  "HF model folder (config.json, model.safetensors, vocab.txt) or a training checkpoint file")
      ->required();
  sub->add_option("--adapter", o.adapter,
                  "a PEFT LoRA adapter folder (adapter_config.json, adapter_model.safetensors) over the --model folder, "
                  "its base");
  sub->add_option("--base", o.base,
                  "a LoRA checkpoint's base model folder, when it is no longer where the run read it (its sha256 is "
                  "checked)");
  sub->add_option("--data", o.data_path,
                  "input file: .tsv (GLUE style, header row), .csv (header row) or .jsonl; CoNLL for a token "
                  "classifier; a QA model: SQuAD .json or .jsonl")
      ->required();
  sub->add_option("--text-a", d.text_a,
                  "first text column: header name / JSON key, or 0-based index (required for a sequence classifier "
                  "from a HF folder; token classifier: the words column, default tokens; multiple choice: the "
                  "context)");
  sub->add_option("--text-b", d.text_b,
                  "second text column for pairs (multiple choice: put before each choice, as SWAG's sent2)");
  sub->add_option("--label", d.label,
                  "label column; with labels, the metrics train reports are printed (token classifier: the tags "
                  "column, e.g. ner_tags, or a CoNLL file's tag column index)");
  sub->add_option("--choices", d.choices,
                  "multiple choice: the choice columns (comma-separated), or one column holding a list")
      ->delimiter(',');
  sub->add_option("--preset", flags->preset, "multiple choice: none, swag or copa (names the columns not given)")
      ->capture_default_str();
  sub->add_option("--format", flags->format, "tsv, csv, jsonl, conll, or auto (from the extension)")
      ->capture_default_str();
  sub->add_option("--on-bad-row", flags->on_bad_row, "error: stop at the first bad row; skip: drop and count it")
      ->capture_default_str();
  sub->add_option("--max-length", d.max_length,
                  "truncate each row to this many ids, longest_first (0 = none); question answering: the window "
                  "(default 384)")
      ->capture_default_str();
  sub->add_option("--batch-size", o.batch_size, "rows per batch on each rank")->capture_default_str();
  sub->add_option("--dtype", flags->dtype,
                  "compute dtype: float32, or bfloat16 (a bf16 run's precision; LayerNorm, softmax and metrics in fp32)")
      ->capture_default_str();
  sub->add_option("--output", flags->output,
                  "predictions, one JSON line per row, written by rank 0: a file (replaced only when complete; a "
                  "link is followed), a device or FIFO (written in place), or - for standard output")
      ->required();
  const std::string qa = "Question answering (a model fine-tuned with model.task = question_answering)";
  sub->add_option("--doc-stride", d.doc_stride, "tokens shared by consecutive windows of a long context")
      ->capture_default_str()
      ->group(qa);
  sub->add_option("--n-best-size", d.n_best_size, "start and end candidates per window")->capture_default_str()->group(qa);
  sub->add_option("--max-answer-length", d.max_answer_length, "the longest answer, in tokens")
      ->capture_default_str()
      ->group(qa);
  sub->add_flag("--version-2-with-negative", d.version_2_with_negative,
                "SQuAD v2: a question may have no answer (answer \"\")")
      ->group(qa);
  sub->add_option("--null-score-diff-threshold", d.null_score_diff_threshold,
                  "v2: answer \"\" when the null score beats the best span's by more")
      ->capture_default_str()
      ->group(qa);
  sub->add_flag("--with-answers", "read the file's gold answers and print the official EM / F1")->group(qa);
  sub->add_option("--predictions-json", flags->predictions_json,
                  "the {id: answer} file for the official script (default: predictions.json beside --output)")
      ->group(qa);
  sub->callback([&world, flags, sub] {
    for (const CLI::Option* option : sub->get_options())
      if (option->count() > 0 && !option->get_lnames().empty()) flags->given.insert("--" + option->get_lnames()[0]);
    run_predict(world, *flags);
  });
}

}  // namespace shardtrain
