// Preflight: checks of a run that need the model's config and the run config
// together, made before anything large is allocated.
//
//   EncoderConfig model = ...;  model.set_num_labels(num_labels);
//   check_model_for_data(model, config.data, tokenizer.max_token_type(pairs), model_source);  // type_vocab_size
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

// Error when the model cannot take the tokens: the tokenizer gives the data
// (sentence pairs when data.text_b is set) token types up to max_token_type
// (Tokenizer::max_token_type: 1 for BERT's pairs, 0 for RoBERTa's), and the
// model's type embeddings hold type_vocab_size of them. `model_source` names
// the model's config.json for the message.
void check_model_for_data(const EncoderConfig& model, const DataConfig& data, int max_token_type,
                          const std::string& model_source);

}  // namespace shardtrain
