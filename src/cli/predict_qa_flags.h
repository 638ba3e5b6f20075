// Private to the cli layer: `predict`'s flags for a question-answering model
// and its run (src/cli/cmd_predict_qa.cpp); cmd_predict.cpp registers them and
// hands over when the model's task is question answering.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "shardtrain/train/predict_qa.h"

namespace shardtrain {

class World;

struct QaPredictFlags {
  QaPredictOptions options;
  std::string predictions_json;  // "" = predictions.json beside --output
};

void add_qa_predict_flags(CLI::App& predict, QaPredictFlags& flags);

// Runs predict_qa_file and writes, on rank 0, --output (one JSON line per
// question), predictions.json ({id: answer}) and, for v2, null_odds.json
// beside it; every output is checked before anything is written (none in
// `run_folder`, the checkpoint's run folder, when not empty). `options` and
// flags.options hold the resolved settings (cli/predict_settings.h).
void run_predict_qa(const World& world, const PredictOptions& options, const QaPredictFlags& flags,
                    const std::string& output, const std::string& run_folder, const PredictModel& model);

}  // namespace shardtrain
