#include "shardtrain/train/preflight.h"

#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain {

void check_model_for_data(const EncoderConfig& model, const DataConfig& data, const std::string& model_source) {
  // Families without token types (DistilBERT, ModernBERT) ignore them, and
  // RoBERTa's tokenizers give every token type 0.
  if (model.has_token_types() && model.family != ModelFamily::kRoberta && !data.text_b.empty() &&
      model.type_vocab_size < 2)
    throw Error(model_source + ": type_vocab_size = " + std::to_string(model.type_vocab_size) +
                ", but data.text_b = '" + shorten(data.text_b) +
                "' makes sentence pairs, whose second sentence has token type 1; use a model with type_vocab_size "
                ">= 2, or set data.text_b = \"\" for single sentences");
}

}  // namespace shardtrain
