// Private to the data layer: the BPE model of a byte-level BPE tokenizer
// (docs/DESIGN.md "Tokenizers"). It turns one pre-tokenized word (raw bytes)
// into ids the way Hugging Face tokenizers' BPE model does: every byte starts
// as its own symbol, then the adjacent pair with the lowest merge rank is
// merged, the leftmost one on ties, until no pair has a merge. Results are
// cached per thread (word -> ids), so a repeated word costs one hash lookup.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace shardtrain::bpe {

struct BpeModelSpec {
  // Every model token (vocab.json / tokenizer.json model.vocab), written in
  // the byte alphabet (data/byte_level.h), with its id.
  std::vector<std::pair<std::string, int32_t>> vocab;
  // Merges in rank order (rank = index), each a pair of tokens of `vocab`.
  std::vector<std::pair<std::string, std::string>> merges;
  int32_t unk_id = -1;         // for a byte without a token; -1: such bytes are dropped (HF without unk_token)
  bool ignore_merges = false;  // HF ignore_merges: a word that is a token is that token
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
  // in none).
  void encode_word_ranges(std::string_view word, std::vector<int32_t>& out,
                          std::vector<std::pair<uint32_t, uint32_t>>& ranges) const;

 private:
  struct MergeTable;
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;
  // Merges `symbols` in place (and their byte ranges when `ranges` is set).
  void merge_by_scan(std::vector<int32_t>& symbols, std::vector<std::pair<uint32_t, uint32_t>>* ranges) const;

  std::unique_ptr<MergeTable> merges_;
  int32_t byte_ids_[256];
  std::unordered_map<std::string, int32_t> byte_vocab_;  // raw bytes -> id (ignore_merges)
  std::vector<int32_t> token_bytes_;  // id -> byte length of its token (-1: not a byte-alphabet token)
  bool ignore_merges_ = false;
  int32_t unk_id_ = -1;
  uint64_t cache_owner_;  // distinct per model: the per-thread cache belongs to one model at a time
};

}  // namespace shardtrain::bpe
