// Private to the data layer: the BPE pipeline behind Tokenizer
// (include/shardtrain/data/tokenizer.h, docs/DESIGN.md "Tokenizers"): byte-level
// BPE (a ByteLevel pre-tokenizer) and SentencePiece-style BPE (Gemma, mmBERT,
// Llama-2: "▁" for spaces, byte fallback). Built by tokenizer_files.cpp from
// tokenizer.json or vocab.json + merges.txt.
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

// One step of a tokenizer.json normalizer.
struct BpeNormalizerStep {
  enum Kind { kNfc, kNfd, kNfkc, kNfkd, kLowercase, kReplace, kPrepend };
  Kind kind;
  std::string pattern;  // kReplace: the text replaced, every occurrence (HF Replace with a String pattern)
  std::string content;  // kReplace: what replaces it; kPrepend: what goes before non-empty text
};

// HF's Metaspace pre-tokenizer: spaces become `replacement`, which is also
// prepended (prepend_scheme), then the text is cut before each replacement
// (split; MergedWithNext).
struct MetaspaceSpec {
  enum class Prepend { kAlways, kNever, kFirst };  // kFirst: only where the text starts, not after an added token
  std::string replacement = "\xE2\x96\x81";  // "▁", one character
  Prepend prepend = Prepend::kAlways;
  bool split = true;
};

// Core: source is tokenizer.json or vocab.json; tokens as the file writes them.
struct Tokenizer::Bpe : Tokenizer::Core {
  std::unordered_map<std::string, int32_t> token_ids;
  std::unique_ptr<bpe::BpeModel> model;
  std::vector<BpeNormalizerStep> normalizer;
  // false: SentencePiece-style BPE (no ByteLevel pre-tokenizer; bpe_model.h).
  bool byte_level = true;
  // SentencePiece-style: a Metaspace pre-tokenizer; without one, each text
  // between added tokens is one word.
  std::optional<MetaspaceSpec> metaspace;
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
  void normalized_segment(std::string_view text, const TokenSpan* spans, Pass& pass, bool at_start) const;
  // `at_start`: the segment starts the text (Metaspace's prepend_scheme "first").
  void pre_tokenized_segment(std::string_view text, const TokenSpan* spans, Pass& pass, bool at_start) const;
  void metaspace_segment(std::string_view text, const TokenSpan* spans, Pass& pass, bool at_start) const;
  // One word through the model (ids, and with pass.spans the spans of `spans`).
  void encode_word(std::string_view word, const TokenSpan* spans, Pass& pass) const;
};

}  // namespace shardtrain
