// Private to the data layer: the two byte-level pieces of GPT-2 style BPE
// (docs/DESIGN.md "Tokenizers"), as Hugging Face tokenizers' ByteLevel
// pre-tokenizer defines them.
//   - The byte-to-unicode alphabet: each of the 256 byte values is written as
//     one printable code point (the printable Latin-1 bytes as themselves, the
//     others as U+0100 + n in byte order), so vocab.json / merges.txt tokens
//     are text. The BPE model works on raw bytes: tokens are decoded once, at
//     load time.
//   - The GPT-2 pre-tokenizer regex
//       's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//     matched by hand (first alternative that matches at each position, as a
//     backtracking engine does), with utf8proc's categories.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shardtrain::byte_level {

// Code point that writes each byte value.
const std::array<int32_t, 256>& byte_to_code_point();

// Token text in the byte alphabet -> its raw bytes. False when a character is
// not one of the 256 (e.g. an added token such as "  " kept verbatim).
bool decode_token(std::string_view token, std::string& bytes);

// Raw bytes -> token text in the byte alphabet.
std::string encode_bytes(std::string_view bytes);

// Byte ranges [begin, end) of the pieces of valid UTF-8 `text`, in order, cut
// by the GPT-2 regex; appends to `pieces`. Every byte is in exactly one piece.
void split_gpt2(std::string_view text, std::vector<std::pair<uint32_t, uint32_t>>& pieces);

// The same cut by Llama-3's Split regex (kLlama3SplitPattern; Llama-3,
// EuroBERT): 's 't 're 've 'm 'll 'd in any case, one character that is not a
// newline, letter or number before a run of letters, numbers in threes,
// punctuation with its trailing newlines, whitespace up to its last newline,
// then GPT-2's whitespace rules.
void split_llama3(std::string_view text, std::vector<std::pair<uint32_t, uint32_t>>& pieces);

// The pattern of a tokenizer.json Split pre-tokenizer that split_llama3 cuts by.
inline constexpr const char* kLlama3SplitPattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

}  // namespace shardtrain::byte_level
