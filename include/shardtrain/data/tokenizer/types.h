// The types the tokenizer facade (data/tokenizer.h) and its engines
// (src/data/tokenizer/: WordPiece, byte-level BPE, SentencePiece, the
// normalizer and the templates) share: the options, a token's span in its
// text, and one encoded example. Only standard headers.
#pragma once

#include <cstdint>
#include <vector>

namespace shardtrain {

struct TokenizerOptions {
  // Lowercase the text (HF do_lower_case; true for *-uncased vocabularies).
  bool lowercase = false;
  // Strip accents (NFD, drop Mn). HF: strip_accents follows lowercase unless
  // set, so accents are also stripped whenever `lowercase` is true, unless
  // `keep_accents` says otherwise.
  bool strip_accents = false /* HF: follows lowercase unless set */;
  // Put spaces around CJK ideographs (HF tokenize_chinese_chars).
  bool tokenize_chinese_chars = true;
  // HF strip_accents=False together with do_lower_case=True: lowercase but keep
  // accents. Setting both strip_accents and keep_accents is an error.
  bool keep_accents = false;

  // Whether accents are stripped with these options.
  bool strips_accents() const { return strip_accents || (lowercase && !keep_accents); }
};

// Where a token came from: bytes [begin, end) of the UTF-8 text it was cut
// from (HF's return_offsets_mapping, in bytes instead of characters: the
// bytes of a span are exactly the characters of HF's span). Template special
// tokens get {0, 0}, as in HF. Where HF's normalizer changed the text, the span
// points at the original: an accent stripped with NFD + Mn removal, a
// lowercased letter, a fullwidth letter NFKC folded (see "Offsets" below).
struct TokenSpan {
  int32_t begin = 0;
  int32_t end = 0;
  bool operator==(const TokenSpan& other) const { return begin == other.begin && end == other.end; }
};

// One encoded example. WordPiece: input_ids = [CLS] a [SEP] (b [SEP]);
// token_type_ids is 0 for [CLS], a and the first [SEP], 1 for b and the last
// [SEP]. BPE: the template's ids and type ids. The attention
// mask is all ones (padding is the collator's job), so it is not stored.
//
// The per-token vectors below are filled only by the calls that say so
// (encode() leaves them empty); when filled they have input_ids.size()
// entries.
struct Encoding {
  std::vector<int32_t> input_ids;
  std::vector<uint8_t> token_type_ids;
  // encode_with_offsets, encode_words: each token's span in its own text
  // (text_a, text_b, or its word), {0, 0} for template special tokens.
  std::vector<TokenSpan> offsets;
  // encode_with_offsets, encode_words, apply_template: HF's sequence_ids():
  // -1 for a template special token, 0 for text a's tokens, 1 for text b's.
  std::vector<int8_t> sequence_ids;
  // encode_words: the index in `words` of the word each token came from; -1
  // for template special tokens (HF's word_ids()).
  std::vector<int32_t> word_ids;
};

}  // namespace shardtrain
