// Private to the data layer: the BPE model of a BPE tokenizer (docs/DESIGN.md
// "Tokenizers"). It turns one pre-tokenized word into ids the way Hugging
// Face tokenizers' BPE model does: the word starts as symbols, then the
// adjacent pair with the lowest merge rank is merged, the leftmost one on
// ties, until no pair has a merge. Two kinds of model:
//   - byte-level (GPT-2, RoBERTa, ModernBERT, Llama-3): tokens are written in
//     the byte alphabet (byte_level.h) and a word (raw bytes) starts as one
//     symbol per byte;
//   - SentencePiece-style (Gemma, mmBERT, Llama-2): tokens are text and a word
//     starts as one symbol per character; a character without a token becomes
//     its bytes' <0xXX> tokens (byte_fallback, when all of them exist), else
//     the unk token, consecutive ones fused into one (fuse_unk), else nothing.
// Results are cached per thread (word -> ids), so a repeated word costs one
// hash lookup.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace shardtrain::bpe {

struct BpeModelSpec {
  // Every model token (vocab.json / tokenizer.json model.vocab), with its id;
  // in the byte alphabet (data/byte_level.h) when byte_level.
  std::vector<std::pair<std::string, int32_t>> vocab;
  // Merges in rank order (rank = index), each a pair of tokens of `vocab`.
  std::vector<std::pair<std::string, std::string>> merges;
  int32_t unk_id = -1;         // for a byte without a token; -1: such bytes are dropped (HF without unk_token)
  bool ignore_merges = false;  // HF ignore_merges: a word that is a token is that token
  bool byte_level = true;      // false: SentencePiece-style, symbols are characters
  bool byte_fallback = false;  // not byte_level: an unknown character as its <0xXX> tokens
  bool fuse_unk = false;       // not byte_level: consecutive unknown characters are one unk
  std::string source;          // file named in errors
};

class BpeModel {
 public:
  // Throws shardtrain::Error naming spec.source when a merge names a token
  // that is not in the vocabulary, or a byte has no token.
  explicit BpeModel(const BpeModelSpec& spec);
  ~BpeModel();
  BpeModel(const BpeModel&) = delete;
  BpeModel& operator=(const BpeModel&) = delete;

  // Appends the ids of one word (raw bytes, non-empty).
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  // encode_word, and for each id the bytes [first, last) of `word` it covers
  // (appended to `ranges`; a byte without a token that no unk stands for is
  // in none). SentencePiece-style: HF's offsets, which count each symbol's
  // bytes from the end of the one before, so a dropped character (no unk
  // token) moves the ranges after it, and an unk that waits for fusing behind
  // byte-fallback characters (HF adds those first) takes their place.
  void encode_word_ranges(std::string_view word, std::vector<int32_t>& out,
                          std::vector<std::pair<uint32_t, uint32_t>>& ranges) const;

 private:
  struct MergeTable;
  using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;
  // The symbols a word starts as (and their byte ranges when `ranges` is set).
  void initial_symbols(std::string_view word, std::vector<int32_t>& symbols, Ranges* ranges) const;
  // The id of a whole word that is a token (ignore_merges), else -1.
  int32_t whole_word_id(std::string_view word) const;
  // Merges `symbols` in place (and their byte ranges when `ranges` is set):
  // by scanning (short words) or with a heap (long ones).
  void merge_symbols(std::vector<int32_t>& symbols, Ranges* ranges) const;
  void merge_by_scan(std::vector<int32_t>& symbols, Ranges* ranges) const;
  void merge_by_heap(std::vector<int32_t>& symbols, Ranges* ranges) const;

  std::unique_ptr<MergeTable> merges_;
  int32_t byte_ids_[256];      // byte-level: each byte's token; else each byte's <0xXX> token (-1: none)
  // A character's UTF-8 bytes packed into an integer (pack_character) -> the
  // id of the token that is that character (SentencePiece-style).
  std::unordered_map<uint32_t, int32_t> character_ids_;
  std::unordered_map<std::string, int32_t> word_vocab_;  // the word as raw bytes -> id (only with ignore_merges)
  std::vector<int32_t> token_bytes_;  // byte-level: id -> byte length of its token (-1: not a byte-alphabet token)
  bool ignore_merges_ = false;
  bool byte_level_ = true;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  int32_t unk_id_ = -1;
  uint64_t cache_owner_;  // distinct per model: the per-thread cache belongs to one model at a time
};

}  // namespace shardtrain::bpe
