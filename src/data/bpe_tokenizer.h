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

#include "data/bpe_model.h"
#include "shardtrain/data/tokenizer.h"

namespace shardtrain {

// A tokenizer.json added_tokens entry.
struct BpeAddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
};

enum class BpeNormalizerStep { kNfc, kNfd, kNfkc, kNfkd, kLowercase };

// One element of a post-processor template: a sequence (0 = A, 1 = B) or
// special token ids, with the type id it gets.
struct BpeTemplatePiece {
  int sequence = -1;  // -1: special tokens
  std::vector<int32_t> ids;
  uint8_t type_id = 0;
};

// Added tokens of one matching pass, longest first, with the byte pairs they
// can start with (a quick filter: most positions start none).
struct BpeAddedSet {
  std::vector<BpeAddedToken> tokens;
  std::vector<bool> first_two;  // 65536 entries: first byte * 256 + second byte
  bool first_one[256] = {};     // one-byte tokens
  void build(std::vector<BpeAddedToken> list);
  bool empty() const { return tokens.empty(); }
};

struct Tokenizer::Bpe {
  std::string source;                 // the file in messages (tokenizer.json or vocab.json)
  std::vector<std::string> tokens;    // id -> token as the file writes it ("" where no token has the id)
  std::unordered_map<std::string, int32_t> token_ids;
  std::unique_ptr<bpe::BpeModel> model;
  std::vector<BpeNormalizerStep> normalizer;
  bool add_prefix_space = false;
  bool use_regex = true;
  std::vector<BpeAddedToken> added;  // tokenizer.json added_tokens (or RoBERTa's specials)
  // Set by finish(): the added tokens cut out of the raw text (normalized =
  // false) and out of the normalized text (normalized = true; content
  // normalized).
  BpeAddedSet raw_added;
  BpeAddedSet normalized_added;
  std::vector<BpeTemplatePiece> single;
  std::vector<BpeTemplatePiece> pair;
  int32_t cls_id = -1, sep_id = -1, pad_id = -1, unk_id = -1, mask_id = -1;

  // Call once the members are set: splits `added` into the two passes.
  void finish();
  void tokenize(std::string_view text, std::vector<int32_t>& out) const;
  Encoding encode(std::string_view text_a, std::optional<std::string_view> text_b, int max_length) const;
  int num_special(bool is_pair) const;
  int max_type_id(bool is_pair) const;
  void normalize(std::string& text) const;

 private:
  void normalized_segment(std::string_view text, std::vector<int32_t>& out) const;
  void pre_tokenized_segment(std::string_view text, std::vector<int32_t>& out) const;
};

// HF truncate_encodings, LongestFirst: how many of a's and b's tokens to keep
// within `budget` (the WordPiece and BPE encoders share it).
void truncate_longest_first(std::size_t& keep_a, std::size_t& keep_b, std::size_t budget);

}  // namespace shardtrain
