// Private to the data layer: what tokenizer_files.cpp needs of the WordPiece
// engine in tokenizer.cpp (include/shardtrain/data/tokenizer.h).
#pragma once

#include <memory>
#include <string>

#include "shardtrain/data/tokenizer.h"

namespace shardtrain {

struct WordPieceSpecialNames {
  std::string unk = "[UNK]", cls = "[CLS]", sep = "[SEP]", pad = "[PAD]", mask = "[MASK]";
};

// A vocab.txt's content; `path` names it in errors and vocab_path().
std::shared_ptr<Tokenizer::Vocab> wordpiece_parse_vocab(const std::string& text, const std::string& path,
                                                        const WordPieceSpecialNames& names);
// Whether some non-special token changes when lowercased.
bool wordpiece_vocabulary_is_cased(const Tokenizer::Vocab& vocab);

}  // namespace shardtrain
