// `shardtrain predict` with a question-answering model: the answer of every
// question of a SQuAD JSON / JSON Lines file, and the official script's
// predictions.json beside the output (docs/question-answering.md).
#include "cli/predict_qa_flags.h"

#include <filesystem>
#include <string>
#include <system_error>

#include "cli/cli_util.h"
#include "shardtrain/comm/mpi_helpers.h"
#include "shardtrain/comm/world.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain {

void add_qa_predict_flags(CLI::App& predict, QaPredictFlags& flags) {
  QaPredictOptions& o = flags.options;
  const std::string group = "Question answering (a model fine-tuned with model.task = question_answering)";
  predict.add_option("--doc-stride", o.doc_stride, "tokens shared by consecutive windows of a long context")
      ->capture_default_str()
      ->group(group);
  predict.add_option("--n-best-size", o.postprocess.n_best_size, "start and end candidates per window")
      ->capture_default_str()
      ->group(group);
  predict.add_option("--max-answer-length", o.postprocess.max_answer_length, "the longest answer, in tokens")
      ->capture_default_str()
      ->group(group);
  predict.add_flag("--version-2-with-negative", o.postprocess.version_2_with_negative,
                   "SQuAD v2: a question may have no answer (answer \"\")")
      ->group(group);
  predict.add_option("--null-score-diff-threshold", o.postprocess.null_score_diff_threshold,
                     "v2: answer \"\" when the null score beats the best span's by more")
      ->capture_default_str()
      ->group(group);
  predict.add_flag("--with-answers", o.with_answers, "read the file's gold answers and print the official EM / F1")
      ->group(group);
  predict.add_option("--predictions-json", flags.predictions_json,
                     "the {id: answer} file for the official script (default: predictions.json beside --output)")
      ->group(group);
}

namespace {

// Where each file goes, refused before anything is written when one would
// replace another or an input.
struct QaOutputs {
  std::string predictions_json, null_odds_json;
};

QaOutputs qa_outputs(const PredictOptions& options, const QaPredictFlags& flags, const std::string& output,
                     const std::string& run_folder) {
  QaOutputs out;
  out.predictions_json =
      flags.predictions_json.empty() ? qa_file_beside(output, "predictions.json") : flags.predictions_json;
  if (flags.options.postprocess.version_2_with_negative) out.null_odds_json = qa_file_beside(output, "null_odds.json");
  if (output == "-" && flags.predictions_json.empty())
    log_warn("predict: --output - (standard output) has no folder to put predictions.json%s in; give "
             "--predictions-json FILE for the official script's file",
             out.null_odds_json.empty() && flags.options.postprocess.version_2_with_negative ? " and null_odds.json" : "");
  for (const auto& [flag, path] : {std::pair<std::string, std::string>{"--predictions-json", out.predictions_json},
                                   {"null_odds.json (beside --output)", out.null_odds_json}}) {
    if (path.empty() || path == "-") continue;
    if (output != "-" && same_file(path, output))
      throw Error(flag + " '" + path + "' is also --output; name --output otherwise (or set --predictions-json)");
    if (same_file(path, options.data_path)) throw Error(flag + " '" + path + "' is the input file");
    refuse_output_over_input(flag, path, "--model", options.model_dir);
    if (!run_folder.empty()) refuse_output_in_run_folder(flag, path, run_folder);
    // Checked now, not when --output has been written.
    std::error_code error;
    if (std::filesystem::is_directory(path, error)) throw Error(flag + " '" + path + "' is a folder; name a file");
    const std::filesystem::path parent = std::filesystem::path(path).has_parent_path()
                                             ? std::filesystem::path(path).parent_path()
                                             : std::filesystem::path(".");
    if (!std::filesystem::is_directory(parent, error))
      throw Error(flag + " '" + path + "': folder '" + parent.string() + "' does not exist");
  }
  return out;
}

}  // namespace

void run_predict_qa(const World& world, const PredictOptions& options, const QaPredictFlags& flags,
                    const std::string& output, const std::string& run_folder, const PredictModel& model) {
  const QaOutputs files = qa_outputs(options, flags, output, run_folder);
  const QaPredictResult result = predict_qa_file(options, flags.options, model, world.comm());
  on_rank0(world.comm(), "predict: rank 0 writes " + output, [&] {
    write_qa_predictions_jsonl(result, output);
    if (!files.predictions_json.empty()) write_qa_predictions_json(result, files.predictions_json);
    if (!files.null_odds_json.empty()) write_qa_null_odds_json(result, files.null_odds_json);
  });
  log_info("predict: %lld questions (%lld windows of %d tokens, stride %d) on %d ranks in %.3f s (%.1f questions/s, "
           "batch %lld per rank) -> %s%s",
           static_cast<long long>(result.table.size()), static_cast<long long>(result.num_features),
           options.max_length, flags.options.doc_stride, result.world_size, result.seconds,
           result.seconds > 0 ? static_cast<double>(result.table.size()) / result.seconds : 0.0,
           static_cast<long long>(options.batch_size), output.c_str(),
           files.predictions_json.empty() ? "" : (", " + files.predictions_json).c_str());
  if (!result.metrics.empty()) {
    std::string summary;
    for (const std::string& name : qa_metric_names(result.version_2)) {
      const auto found = result.metrics.find(name);
      if (found != result.metrics.end()) summary += str_format("%s%s %.4f", summary.empty() ? "" : ", ", name.c_str(), found->second);
    }
    log_info("eval: %s (%lld questions)", summary.c_str(), static_cast<long long>(result.table.size()));
  } else if (!result.unscored_reason.empty()) {
    log_info("predict: answers not scored: %s", result.unscored_reason.c_str());
  }
}

}  // namespace shardtrain
