// Private to the data layer: the byte-level BPE pipeline behind Tokenizer
// (include/shardtrain/data/tokenizer.h, docs/DESIGN.md "Tokenizers"). Built
// by tokenizer_files.cpp from tokenizer.json or vocab.json + merges.txt.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/tokenizer/added_tokens.h"
#include "data/tokenizer/bpe_model.h"
#include "data/tokenizer/tokenizer_template.h"
#include "shardtrain/data/tokenizer.h"

namespace shardtrain {

enum class BpeNormalizerStep { kNfc, kNfd, kNfkc, kNfkd, kLowercase };

// Core: source is tokenizer.json or vocab.json; tokens as the file writes them.
struct Tokenizer::Bpe : Tokenizer::Core {
  std::unordered_map<std::string, int32_t> token_ids;
  std::unique_ptr<bpe::BpeModel> model;
  std::vector<BpeNormalizerStep> normalizer;
  bool add_prefix_space = false;
  bool use_regex = true;
  // A Split pre-tokenizer with Llama-3's regex before ByteLevel (whose own
  // regex is then off): byte_level::split_llama3.
  bool llama3_split = false;
  std::vector<AddedToken> added;  // tokenizer.json added_tokens (or RoBERTa's specials)
  // Set by finish(): the added tokens cut out of the raw text (normalized =
  // false) and out of the normalized text (normalized = true; content
  // normalized).
  AddedTokenSet raw_added;
  AddedTokenSet normalized_added;
  // Set by finish(): per id, the spaces (Ġ or whitespace) its token string
  // starts and ends with, for ByteLevel offset trimming.
  std::vector<uint16_t> leading_spaces, trailing_spaces;

  // Call once the members are set: splits `added` into the two passes.
  void finish();
  // Ids of one text appended to `out`; with `spans`, each token's span in
  // `text` (untrimmed: the post-processor trims them, tokenizer_template.h). `prefix_space`: -1 the pre-tokenizer's
  // add_prefix_space, 0 / 1 instead of it (pre-split words).
  void tokenize(std::string_view text, std::vector<int32_t>& out, std::vector<TokenSpan>* spans = nullptr,
                int prefix_space = -1) const;
  void normalize(std::string& text) const;

 private:
  struct Pass;
  void normalized_segment(std::string_view text, const TokenSpan* spans, Pass& pass) const;
  void pre_tokenized_segment(std::string_view text, const TokenSpan* spans, Pass& pass) const;
};

}  // namespace shardtrain
