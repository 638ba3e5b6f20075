// Preflight: checks of a run that need the model's config and the run config
// together, made before anything large is allocated.
//
//   EncoderConfig model = ...;  model.set_num_labels(num_labels);
//   check_model_for_data(model, config.data, model_source);          // type_vocab_size vs text_b
//
// The memory a job needs, and the refusal of one that cannot fit, are
// train/memory_estimate.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "shardtrain/core/run_config.h"
#include "shardtrain/model/encoder_config.h"

namespace shardtrain {

// Error when the model cannot take the data: sentence pairs (data.text_b set)
// need token type 1, i.e. type_vocab_size >= 2. `model_source` names the
// model's config.json for the message.
void check_model_for_data(const EncoderConfig& model, const DataConfig& data, const std::string& model_source);

}  // namespace shardtrain
