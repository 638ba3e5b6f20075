// Private to the data layer: what every tokenizer engine shares once a text
// is tokens (include/shardtrain/data/tokenizer.h, docs/DESIGN.md
// "Tokenizers"): the post-processor's template, longest_first truncation,
// ByteLevel offset trimming, and putting an Encoding together.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer/unicode_text.h"
#include "shardtrain/data/tokenizer.h"

namespace shardtrain {

// One element of a post-processor template: a sequence (0 = A, 1 = B) or
// special token ids, with the type id it gets.
struct TemplatePiece {
  int sequence = -1;  // -1: special tokens
  std::vector<int32_t> ids;
  uint8_t type_id = 0;
};

struct Tokenizer::Template {
  std::vector<TemplatePiece> single;
  std::vector<TemplatePiece> pair;
  // HF's ByteLevel offset trimming (RobertaProcessing / ByteLevel
  // post-processor with trim_offsets): leading and trailing spaces of a token
  // (Ġ, or whitespace in an added token) are cut from its span, except the
  // one space add_prefix_space put before a sequence's first token.
  bool trim_offsets = false;
  bool trim_add_prefix_space = false;

  int num_special(bool is_pair) const;
  int max_type_id(bool is_pair) const;
};

// What every engine holds besides its model: where it was read from, its
// tokens by id, the post-processor and the special ids (-1: none).
struct Tokenizer::Core {
  std::string source;               // the file named in messages and vocab_path()
  std::vector<std::string> tokens;  // id -> token ("" where no token has the id)
  Template post;
  int32_t cls_id = -1, sep_id = -1, pad_id = -1, unk_id = -1, mask_id = -1;
};

// HF truncate_encodings, LongestFirst: how many of a's and b's tokens to keep
// within `budget`.
void truncate_longest_first(std::size_t& keep_a, std::size_t& keep_b, std::size_t budget);

// One sequence's tokens as assemble_template() takes them (`spans` / `words`
// are read only when the Encoding wants them).
struct TokenRun {
  const int32_t* ids = nullptr;
  const TokenSpan* spans = nullptr;
  const int32_t* words = nullptr;
  std::size_t size = 0;
  // The last `keep` tokens when `left`, else the first `keep`.
  TokenRun kept(std::size_t keep, bool left) const;
};

// What assemble_template() fills besides ids and type ids.
struct EncodingParts {
  bool offsets = false;
  bool word_ids = false;
  bool sequence_ids = false;
};

// The template around a (and b when not null).
Encoding assemble_template(const Tokenizer::Template& post, const TokenRun& a, const TokenRun* b,
                           EncodingParts parts);

// ByteLevel trimming of spans[0 .. count) (see Template::trim_offsets):
// leading[id] / trailing[id] count the spaces a token starts / ends with;
// text_of(i) is the text spans[i] points into (spans step over whole
// characters of it, as HF's character offsets do).
template <class TextOf>
void trim_byte_level_spans(const int32_t* ids, TokenSpan* spans, std::size_t count,
                           const std::vector<uint16_t>& leading, const std::vector<uint16_t>& trailing,
                           bool add_prefix_space, TextOf text_of);

template <class TextOf>
void trim_byte_level_spans(const int32_t* ids, TokenSpan* spans, std::size_t count,
                           const std::vector<uint16_t>& leading, const std::vector<uint16_t>& trailing,
                           bool add_prefix_space, TextOf text_of) {
  for (std::size_t i = 0; i < count; ++i) {
    const auto id = static_cast<std::size_t>(ids[i]);
    int lead = id < leading.size() ? leading[id] : 0;
    const int trail = id < trailing.size() ? trailing[id] : 0;
    if (lead == 0 && trail == 0) continue;
    TokenSpan& span = spans[i];
    const std::string_view text = text_of(i);
    // HF: a sequence's first token (or one starting at offset 0) keeps the
    // single space add_prefix_space put there.
    if (lead > 0 && (i == 0 || span.begin == 0) && add_prefix_space && lead == 1) lead = 0;
    for (int k = 0; k < lead && span.begin < span.end; ++k)
      span.begin += unicode::utf8_length(static_cast<unsigned char>(text[static_cast<std::size_t>(span.begin)]));
    if (span.begin > span.end) span.begin = span.end;
    if (trail > 0) {
      // HF steps back only when the end is at least `trail` characters in.
      int32_t end = span.end;
      int steps = 0;
      while (steps < trail && end > 0) {
        --end;
        while (end > 0 && (static_cast<unsigned char>(text[static_cast<std::size_t>(end)]) & 0xC0) == 0x80) --end;
        ++steps;
      }
      if (steps == trail) span.end = std::max(end, span.begin);
    }
  }
}

}  // namespace shardtrain
