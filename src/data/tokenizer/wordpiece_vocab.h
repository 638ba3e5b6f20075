// Private to the data layer: what tokenizer_files.cpp needs of the WordPiece
// engine in tokenizer.cpp (include/shardtrain/data/tokenizer.h).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shardtrain/data/tokenizer/types.h"

namespace shardtrain {

struct WordPieceSpecialNames {
  std::string unk = "[UNK]", cls = "[CLS]", sep = "[SEP]", pad = "[PAD]", mask = "[MASK]";
};

// A vocab.txt's content; `path` names it in errors and vocab_path().
std::shared_ptr<Tokenizer::Vocab> wordpiece_parse_vocab(const std::string& text, const std::string& path,
                                                        const WordPieceSpecialNames& names);
// Whether some non-special token changes when lowercased.
bool wordpiece_vocabulary_is_cased(const Tokenizer::Vocab& vocab);
// The WordPiece ids of one text (special tokens cut out first), appended to
// `out`; with `spans`, each token's span in `text` appended to it.
void wordpiece_tokenize(const Tokenizer::Vocab& vocab, const TokenizerOptions& options, std::string_view text,
                        std::vector<int32_t>& out, std::vector<TokenSpan>* spans);
// A token's id (-1: none).
int32_t wordpiece_token_id(const Tokenizer::Vocab& vocab, std::string_view token);

}  // namespace shardtrain
