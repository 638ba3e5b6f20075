// Private to the data layer: the Unicode character classes and transforms the
// BERT tokenizer needs, with the exact definitions of Hugging Face tokenizers'
// BertNormalizer / BertPreTokenizer (see include/shardtrain/data/tokenizer.h).
// Categories, decompositions and case mappings come from utf8proc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shardtrain/data/tokenizer/types.h"

namespace shardtrain::unicode {

// Decodes the well-formed UTF-8 sequence starting at s[0] (n > 0 bytes left).
// Returns the code point and sets *length to its byte count, or returns -1 and
// sets *length = 1 when s[0] does not start a well-formed sequence (Unicode
// Table 3-7: no overlongs, no surrogates, nothing above U+10FFFF).
int32_t decode_utf8(const unsigned char* s, std::size_t n, std::size_t* length);

// Byte length of the UTF-8 character that starts with `lead` (1 for a byte
// that starts none: a continuation byte or an invalid one).
inline int utf8_length(unsigned char lead) {
  return lead < 0xC0 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : lead < 0xF8 ? 4 : 1;
}

// Writes the UTF-8 form of a valid code point to dst (4 bytes room); returns the byte count.
int encode_utf8(int32_t code_point, char* dst);

// HF is_control: general category Cc, Cf or Co, except \t \n \r.
bool is_control(int32_t code_point);
// HF is_whitespace: \t \n \r or the Unicode White_Space property (Rust char::is_whitespace).
bool is_whitespace(int32_t code_point);
// HF _is_chinese_char: the CJK Unified Ideographs blocks (incl. extensions A-E)
// and the CJK Compatibility Ideographs (+ supplement).
bool is_chinese_char(int32_t code_point);
// HF is_bert_punc: ASCII punctuation (33-47, 58-64, 91-96, 123-126) or
// general category Pc, Pd, Ps, Pe, Pi, Pf, Po.
bool is_punctuation(int32_t code_point);
// General category Mn.
bool is_nonspacing_mark(int32_t code_point);
// Whether lowercasing changes the code point (an uncased vocabulary has no
// token with such a character: lowercased text could never reach it).
bool changes_when_lowercased(int32_t code_point);

// Appends the canonical decomposition (NFD, not yet canonically ordered).
void append_nfd(int32_t code_point, std::vector<int32_t>& out);
// Canonical ordering of combining marks (stable sort of each run of nonzero
// combining classes), completing NFD over a decomposed sequence.
void canonical_order(int32_t* begin, int32_t* end);
// Appends the full lowercase mapping (Rust char::to_lowercase: the simple
// mapping plus the one unconditional multi-character rule, U+0130 -> i U+0307).
void append_lowercase(int32_t code_point, std::vector<int32_t>& out);

// Byte-level BPE (GPT-2 pre-tokenizer regex classes): general category L*
// (\p{L}) and N* (\p{N}).
bool is_letter(int32_t code_point);
bool is_number(int32_t code_point);

// Unicode normalization forms of HF normalizers (NFC, NFD, NFKC, NFKD).
enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };
// Replaces `text` by its normal form. `text` must be valid UTF-8 (see
// sanitize_utf8). ASCII text is returned unchanged without a copy.
void normalize(std::string& text, NormalForm form);
// Alignment through normalization, as HF's NormalizedString keeps it
// (token offsets point at the original text). A normalization is a stream
// of output characters, each with a "change" (the unicode-normalization-
// alignments crate's): 0 replaces the next input character, +1 is inserted
// after it, -n replaces the next input character and removes n more.
struct CharChange {
  int32_t code_point;
  int change;
};
// NFD (NFKD with `compatibility`) of code_points[0 .. count) with changes:
// each input character's decomposition is its first output with change 0 and
// the rest +1, then each run of combining marks is stably sorted by class
// (the changes move with the characters).
void decompose_with_changes(const int32_t* code_points, std::size_t count, bool compatibility,
                            std::vector<CharChange>& out);
// Canonical composition of a decomposed stream (NFC / NFKC = decompose, then
// this): a composed character's change is the sum of its parts' minus one
// per part merged into it.
void compose_with_changes(const std::vector<CharChange>& decomposed, std::vector<CharChange>& out);
// HF NormalizedString::transform: the span of each output character, from
// the spans of the input characters, taken by position: a character with
// change <= 0 takes the span of the next unconsumed input character (and
// consumes 1 - change of them), an inserted one the span of the last
// consumed (the first input character's start when none was).
void apply_changes(const std::vector<TokenSpan>& input, const std::vector<CharChange>& changes,
                   std::vector<TokenSpan>& output);
// `text` (valid UTF-8) to its normal form, with `byte_spans` (one span per
// byte of the text, every byte of a character holding that character's)
// carried along: on return one span per byte of the result.
void normalize_aligned(std::string& text, std::vector<TokenSpan>& byte_spans, NormalForm form);
// Full Unicode lowercase (append_lowercase per character), spans carried.
void lowercase_aligned(std::string& text, std::vector<TokenSpan>& byte_spans);

// Replaces every invalid UTF-8 sequence by U+FFFD (as Python's
// errors="replace" reads the bytes); returns false when the text was valid.
bool sanitize_utf8(std::string_view text, std::string& out);
// The text a tokenizer works on: `text` itself when valid, else its
// sanitize_utf8 form kept in `storage`; with `byte_spans`, one span of `text`
// per byte of the result (each byte its character's; a U+FFFD spans the
// bytes it replaced).
std::string_view valid_text(std::string_view text, std::string& storage, std::vector<TokenSpan>* byte_spans);
// One span per byte of valid UTF-8 `text`: each byte its character's span,
// shifted by `base`.
void character_spans(std::string_view text, int32_t base, std::vector<TokenSpan>& byte_spans);

}  // namespace shardtrain::unicode
