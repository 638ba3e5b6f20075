// Private to the data layer: HF's added tokens (tokenizer.json added_tokens,
// a tokenizer's special tokens), cut out of a text before the model sees it
// (AddedVocabulary: leftmost-longest matches; single_word tokens only between
// non-word characters; lstrip / rstrip take the whitespace beside the match).
// Byte-level BPE and SentencePiece share it (include/shardtrain/data/tokenizer.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer/unicode_text.h"

namespace shardtrain {

// A tokenizer.json added_tokens entry.
struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
};

// Added tokens of one matching pass, longest first, with the byte pairs they
// can start with (a quick filter: most positions start none).
struct AddedTokenSet {
  std::vector<AddedToken> tokens;
  std::vector<bool> first_two;  // 65536 entries: first byte * 256 + second byte
  bool first_one[256] = {};     // one-byte tokens
  void build(std::vector<AddedToken> list);
  bool empty() const { return tokens.empty(); }
};

inline bool added_is_word_char(int32_t cp) { return cp == '_' || unicode::is_letter(cp) || unicode::is_number(cp); }

// The code point that ends at text[end - 1] (end > 0), and where it starts.
inline int32_t added_code_point_before(std::string_view text, std::size_t end, std::size_t* start) {
  std::size_t begin = end - 1;
  while (begin > 0 && end - begin < 4 && (static_cast<unsigned char>(text[begin]) & 0xC0) == 0x80) --begin;
  std::size_t length;
  const int32_t cp = unicode::decode_utf8(reinterpret_cast<const unsigned char*>(text.data()) + begin,
                                          end - begin, &length);
  if (cp < 0 || begin + length != end) {
    *start = end - 1;
    return -1;
  }
  *start = begin;
  return cp;
}

inline int32_t added_code_point_at(std::string_view text, std::size_t position, std::size_t* length) {
  return unicode::decode_utf8(reinterpret_cast<const unsigned char*>(text.data()) + position, text.size() - position,
                              length);
}

// Splits `text` around the added tokens of `tokens` (HF AddedVocabulary:
// leftmost-longest matches; single_word tokens only between non-word
// characters; lstrip / rstrip take the whitespace beside the match). Calls
// gap(segment, offset) for the text between matches and token(id, begin, end)
// for each match with the bytes it took (lstrip / rstrip whitespace included,
// as HF's offsets).
template <class Gap, class Token>
void split_added_tokens(std::string_view text, const AddedTokenSet& set, Gap gap, Token token) {
  if (set.empty()) {
    gap(text, std::size_t{0});
    return;
  }
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  std::size_t segment_start = 0;
  std::size_t position = 0;
  while (position < text.size()) {
    const unsigned first = bytes[position];
    const bool maybe = set.first_one[first] ||
                       (position + 1 < text.size() && set.first_two[first * 256 + bytes[position + 1]]);
    if (!maybe) {
      ++position;
      continue;
    }
    const AddedToken* match = nullptr;
    for (const AddedToken& candidate : set.tokens) {  // longest first
      if (text.compare(position, candidate.content.size(), candidate.content) != 0) continue;
      if (candidate.single_word) {
        std::size_t unused;
        if (position > 0 && added_is_word_char(added_code_point_before(text, position, &unused))) continue;
        const std::size_t end = position + candidate.content.size();
        if (end < text.size() && added_is_word_char(added_code_point_at(text, end, &unused))) continue;
      }
      match = &candidate;
      break;
    }
    if (match == nullptr) {
      ++position;
      continue;
    }
    std::size_t start = position;
    std::size_t end = position + match->content.size();
    if (match->lstrip) {
      while (start > segment_start) {
        std::size_t before;
        const int32_t cp = added_code_point_before(text, start, &before);
        if (cp < 0 || !unicode::is_whitespace(cp) || before < segment_start) break;
        start = before;
      }
    }
    if (match->rstrip) {
      while (end < text.size()) {
        std::size_t length;
        const int32_t cp = added_code_point_at(text, end, &length);
        if (cp < 0 || !unicode::is_whitespace(cp)) break;
        end += length;
      }
    }
    if (start > segment_start) gap(text.substr(segment_start, start - segment_start), segment_start);
    token(match->id, start, end);
    segment_start = end;
    position = end;
  }
  if (segment_start < text.size()) gap(text.substr(segment_start), segment_start);
}

}  // namespace shardtrain
