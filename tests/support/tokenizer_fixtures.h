// What the tokenizer tests share (tests/test_tokenizer*.cpp, compiled
// together in unity batches): the released tokenizers in data/vocab/ loaded
// once, TSV fields, whole files, and the GPT-2 byte alphabet decoded.
#pragma once

#include <fstream>
#include <iterator>
#include <ostream>
#include <string>
#include <vector>

#include "shardtrain/data/tokenizer.h"

namespace shardtrain {
// How doctest prints a span (found by argument-dependent lookup).
inline std::ostream& operator<<(std::ostream& out, const TokenSpan& span) {
  return out << "(" << span.begin << "," << span.end << ")";
}
}  // namespace shardtrain

namespace shardtrain_test {

inline const std::string& source_dir() {
  static const std::string dir = SHARDTRAIN_SOURCE_DIR;
  return dir;
}

// bert-base-cased's vocab.txt, default options (cased).
inline const shardtrain::Tokenizer& bert_cased() {
  static const shardtrain::Tokenizer tokenizer = shardtrain::Tokenizer::from_vocab_file(
      source_dir() + "/data/vocab/bert-base-cased-vocab.txt", shardtrain::TokenizerOptions{});
  return tokenizer;
}
// bert-base-uncased's vocab.txt, lowercase (accents stripped).
inline const shardtrain::Tokenizer& bert_uncased() {
  static const shardtrain::Tokenizer tokenizer = [] {
    shardtrain::TokenizerOptions options;
    options.lowercase = true;
    return shardtrain::Tokenizer::from_vocab_file(source_dir() + "/data/vocab/bert-base-uncased-vocab.txt", options);
  }();
  return tokenizer;
}
inline const shardtrain::Tokenizer& roberta_base() {
  static const shardtrain::Tokenizer tokenizer =
      shardtrain::Tokenizer::from_model_dir(source_dir() + "/data/vocab/roberta-base");
  return tokenizer;
}
inline const shardtrain::Tokenizer& modernbert_tokenizer() {
  static const shardtrain::Tokenizer tokenizer =
      shardtrain::Tokenizer::from_model_dir(source_dir() + "/data/vocab/modernbert");
  return tokenizer;
}

// The tab-separated fields of one line.
inline std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> fields;
  std::size_t start = 0;
  while (true) {
    const std::size_t tab = line.find('\t', start);
    fields.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
    if (tab == std::string::npos) return fields;
    start = tab + 1;
  }
}

// A whole file's bytes ("" when it cannot be read).
inline std::string read_whole_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

// The raw bytes a byte-level BPE token stands for (the GPT-2 alphabet:
// printable Latin-1 as itself, the other bytes as U+0100 + n in byte order).
// Appends them to `out`; false when a character is outside the alphabet (an
// added token such as "<mask>").
inline bool byte_level_bytes(const std::string& token, std::string& out) {
  std::vector<int> byte_of(512, -1);
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    byte_of[printable ? b : next++] = b;
  }
  for (std::size_t i = 0; i < token.size();) {
    const auto c = static_cast<unsigned char>(token[i]);
    int cp = c;
    std::size_t length = 1;
    if (c >= 0xC0 && i + 1 < token.size()) {
      cp = ((c & 0x1F) << 6) | (static_cast<unsigned char>(token[i + 1]) & 0x3F);
      length = 2;
    }
    if (cp >= 512 || byte_of[static_cast<std::size_t>(cp)] < 0) return false;
    out.push_back(static_cast<char>(byte_of[static_cast<std::size_t>(cp)]));
    i += length;
  }
  return true;
}

}  // namespace shardtrain_test
