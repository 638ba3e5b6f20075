#include "shardtrain/train/preflight.h"

#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain {

void check_model_for_data(const EncoderConfig& model, const DataConfig& data, int max_token_type,
                          const std::string& model_source) {
  // Families without token types (DistilBERT, ModernBERT) ignore them.
  if (!model.has_token_types() || max_token_type < model.type_vocab_size) return;
  const std::string type = std::to_string(max_token_type);
  const std::string need = "use a model with type_vocab_size >= " + std::to_string(max_token_type + 1);
  if (!data.text_b.empty())
    throw Error(model_source + ": type_vocab_size = " + std::to_string(model.type_vocab_size) +
                ", but data.text_b = '" + shorten(data.text_b) +
                "' makes sentence pairs, to which the tokenizer gives token type " + type + "; " + need +
                ", or set data.text_b = \"\" for single sentences");
  throw Error(model_source + ": type_vocab_size = " + std::to_string(model.type_vocab_size) +
              ", but the tokenizer gives single sentences token type " + type + "; " + need +
              " or a tokenizer whose template gives type 0");
}

}  // namespace shardtrain
