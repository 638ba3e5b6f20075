// Private to the cli layer: small helpers shared by the subcommands.
#pragma once

#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

#include "shardtrain/comm/mpi_helpers.h"
#include "shardtrain/comm/world.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"

namespace shardtrain {

// --output "" names no file: said before anything else looks at the path
// (an empty path reads as the current folder to std::filesystem).
inline void require_output_named(const std::string& flag, const std::string& output) {
  if (output.empty()) throw Error(flag + " '': the path is empty; name a file (or - for standard output)");
}

// True when a and b name the same file (an existing file through any path, or
// the same normalised path for one that does not exist yet).

inline bool same_file(const std::string& a, const std::string& b) {
  std::error_code error;
  if (std::filesystem::exists(a, error) && std::filesystem::exists(b, error))
    return std::filesystem::equivalent(a, b, error);
  return std::filesystem::weakly_canonical(a, error) == std::filesystem::weakly_canonical(b, error);
}

// The data layer names its settings as config keys (data.text_a); on a
// subcommand that takes them as flags, the message should name the flag.
inline std::string config_keys_to_flags(std::string message) {
  // Longer keys first: "data.labels" is not "data.label" + "s".
  static const std::pair<const char*, const char*> kNames[] = {
      {"data.labels", "the model's labels (id2label)"},
      {"data.text_a", "--text-a"}, {"data.text_b", "--text-b"},         {"data.label", "--label"},
      {"data.format", "--format"}, {"data.on_bad_row", "--on-bad-row"},
      {"data.version_2_with_negative = true", "--version-2-with-negative"},
      {"data.max_length", "--max-length"}, {"data.doc_stride", "--doc-stride"},
      {"data.choices", "--choices"}, {"data.preset", "--preset"}, {"data.n_best_size", "--n-best-size"},
      {"data.max_answer_length", "--max-answer-length"},
      {"data.null_score_diff_threshold", "--null-score-diff-threshold"},
  };
  for (const auto& [key, flag] : kNames) {
    const std::string k(key);
    for (size_t at = message.find(k); at != std::string::npos; at = message.find(k, at + 1))
      message.replace(at, k.size(), flag);
  }
  return message;
}

// Error, before anything is written, when `output` lies in `run_folder`, the
// run folder of the checkpoint a command reads: its other checkpoints,
// config.toml, progress.csv and the run's logs are not the command's to
// replace (by any spelling of the path: real paths are compared).
inline void refuse_output_in_run_folder(const std::string& flag, const std::string& output,
                                        const std::string& run_folder) {
  const std::filesystem::path relative =
      std::filesystem::path(real_path(output)).lexically_relative(real_path(run_folder));
  if (relative.empty() || *relative.begin() == "..") return;
  throw Error(flag + " '" + output + "' is in the run folder '" + run_folder +
              "' of the checkpoint being read (its checkpoints, config.toml, progress.csv and logs are the run's); "
              "choose an " + flag + " outside it (nothing was written)");
}

template <class F>
void with_flag_names(F&& body) {
  try {
    body();
  } catch (const Error& e) {
    throw Error(config_keys_to_flags(e.what()));
  }
}

}  // namespace shardtrain
