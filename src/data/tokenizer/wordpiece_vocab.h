// Private to the data layer: the WordPiece engine's vocabulary
// (wordpiece_vocab.cpp) and what tokenizer_files.cpp needs of the engine in
// tokenizer.cpp (include/shardtrain/data/tokenizer.h).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/tokenizer/string_id_map.h"
#include "data/tokenizer/tokenizer_template.h"
#include "shardtrain/data/tokenizer/types.h"

namespace shardtrain {

struct Tokenizer::Vocab : Tokenizer::Core {
  wordpiece_detail::StringIdMap whole;         // every token
  wordpiece_detail::StringIdMap continuation;  // "##piece" tokens, keyed by "piece"
  // Tokens cut out of the raw text before normalisation, longest first.
  std::vector<std::pair<std::string, int32_t>> specials;
  std::array<bool, 256> special_first_byte{};
  // Id of each single ASCII character as a whole word (unk when absent).
  std::array<int32_t, 128> ascii_char_id{};
};

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
