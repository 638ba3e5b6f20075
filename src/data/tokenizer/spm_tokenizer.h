// Private to the data layer: the SentencePiece engine behind Tokenizer
// (include/shardtrain/data/tokenizer.h, docs/DESIGN.md "SentencePiece").
// libsentencepiece normalizes and segments; this adds what HF's fast
// tokenizers put around it: added tokens cut out first, DeBERTa's lowercase
// and punctuation split, the id layout (XLM-R / CamemBERT's fairseq ids), the
// template, offsets. Built by spm_files.cpp from an spm.model /
// sentencepiece.bpe.model or a tokenizer.json Unigram model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/tokenizer/added_tokens.h"
#include "data/tokenizer/spm_unigram.h"
#include "data/tokenizer/tokenizer_template.h"
#include "shardtrain/data/tokenizer.h"

struct ShardtrainSpm;  // a libsentencepiece processor in its module (data/sentencepiece_module.h)

namespace shardtrain {


struct Tokenizer::Spm : Tokenizer::Core {
  Spm();
  ~Spm();

  struct ProcessorDeleter {
    void operator()(ShardtrainSpm* processor) const;
  };
  std::unique_ptr<ShardtrainSpm, ProcessorDeleter> processor;
  std::vector<int32_t> spm_to_id;  // SentencePiece id -> this tokenizer's id (the layout)
  std::unordered_map<std::string, int32_t> token_ids;
  std::vector<bool> meta_first;  // per id: the token starts with U+2581 (a space or the dummy prefix)
  std::vector<bool> byte_piece;  // per id: a byte-fallback piece <0xXX>
  bool is_byte_piece(int32_t id) const {
    return id >= 0 && static_cast<std::size_t>(id) < byte_piece.size() && byte_piece[static_cast<std::size_t>(id)];
  }
  AddedTokenSet added;           // cut out of the raw text, before SentencePiece sees it
  bool lowercase = false;        // DeBERTa do_lower_case / a Lowercase normalizer
  bool split_by_punct = false;   // DeBERTa split_by_punct / a Punctuation pre-tokenizer
  bool strip_left = true;        // the normalizer strips leading whitespace (offsets, see spm_tokenizer.cpp)
  // Text split at ASCII spaces encodes chunk by chunk as it does whole
  // (set by the loader from the model's flags; see spm_chunks.cpp): then
  // chunks are cached per thread. A Unigram model's chunks also carry what
  // `unigram` needs to tell when the text before a chunk changes its pieces.
  bool chunks = false;
  std::shared_ptr<const spm::Unigram> unigram;  // with chunks, for a Unigram model
  const char* layout = "";  // "deberta-v2", "xlm-roberta", "camembert" or "tokenizer.json"
  uint64_t cache_owner;

  // Ids of one text appended to `out`; with `spans`, each token's span in `text`.
  void tokenize(std::string_view text, std::vector<int32_t>& out, std::vector<TokenSpan>* spans) const;
  // Loads `model` (a serialized ModelProto) into `processor`; an Error naming
  // `file` when libsentencepiece refuses it.
  void load(const std::string& model, const std::string& file);

 private:
  // One tokenize() call: where ids and spans go, and the segment being cut
  // (its text and, with spans, one original span per byte).
  struct Pass {
    std::vector<int32_t>& out;
    std::vector<TokenSpan>* spans;
    std::string_view text;
    const TokenSpan* text_spans = nullptr;
  };
  struct Chunk;  // a chunk's cached values (spm_chunks.cpp)
  void segment(std::string_view text, const TokenSpan* spans, Pass& pass) const;
  // spm_chunks.cpp: a segment encoded chunk by chunk.
  void piece(std::string_view text, std::size_t begin, std::size_t end, bool gap_start, Pass& pass) const;
  void encode_whole(std::string_view text, std::size_t begin, std::size_t end, bool gap_start, Pass& pass) const;
  void emit(std::string_view text, std::size_t unit_begin, const int32_t* triples, std::size_t num_triples,
            std::size_t begin, std::size_t end, bool gap_start, Pass& pass) const;
  Chunk chunk_at(std::string_view chunk) const;
  void chunk_miss(std::string_view chunk, bool cached) const;
  void chunk_values(std::string_view chunk, std::vector<int32_t>& values, std::vector<int32_t>& side) const;
  bool unigram_follows(const Chunk& chunk, float& score) const;
  float running_score(std::string_view text, std::size_t begin, std::size_t end) const;
  void encode_unit(std::string_view unit, std::vector<int32_t>& values, std::string* normalized) const;
};

}  // namespace shardtrain
