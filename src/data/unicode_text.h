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

namespace shardtrain::unicode {

// Decodes the well-formed UTF-8 sequence starting at s[0] (n > 0 bytes left).
// Returns the code point and sets *length to its byte count, or returns -1 and
// sets *length = 1 when s[0] does not start a well-formed sequence (Unicode
// Table 3-7: no overlongs, no surrogates, nothing above U+10FFFF).
int32_t decode_utf8(const unsigned char* s, std::size_t n, std::size_t* length);

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
// Replaces every invalid UTF-8 sequence by U+FFFD (as Python's
// errors="replace" reads the bytes); returns false when the text was valid.
bool sanitize_utf8(std::string_view text, std::string& out);

}  // namespace shardtrain::unicode
