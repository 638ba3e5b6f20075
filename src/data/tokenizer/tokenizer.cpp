// The WordPiece engine: HF's BertTokenizerFast pipeline (clean, CJK spacing,
// accents, basic split, WordPiece, pair truncation, special tokens) reads top
// to bottom in the order HF applies it, and each step is checked against HF's
// ids for every MRPC dev pair (tests/test_tokenizer.cpp); the Unicode tables
// are in unicode_text.cpp, reading folders and files in tokenizer_files.cpp,
// byte-level BPE in bpe_tokenizer.cpp, the vocabulary in wordpiece_vocab.cpp.
#include "shardtrain/data/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "data/tokenizer/bpe_tokenizer.h"
#include "data/tokenizer/tokenizer_template.h"
#include "data/tokenizer/unicode_text.h"
#include "data/tokenizer/wordpiece_vocab.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain {

namespace {

// HF WordpieceTokenizer.max_input_chars_per_word.
constexpr std::size_t kMaxCharsPerWord = 100;

// What an ASCII byte does in the normalizer + pre-tokenizer.
enum class AsciiClass : uint8_t { kDrop, kSpace, kPunctuation, kWord };

constexpr std::array<AsciiClass, 128> make_ascii_classes() {
  std::array<AsciiClass, 128> classes{};
  for (int c = 0; c < 128; ++c) {
    if (c == '\t' || c == '\n' || c == '\r' || c == ' ') {
      classes[c] = AsciiClass::kSpace;
    } else if (c < 32 || c == 127) {
      classes[c] = AsciiClass::kDrop;  // Cc (0x0B and 0x0C too: dropped before whitespace mapping)
    } else if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
               (c >= 123 && c <= 126)) {
      classes[c] = AsciiClass::kPunctuation;
    } else {
      classes[c] = AsciiClass::kWord;
    }
  }
  return classes;
}
constexpr std::array<AsciiClass, 128> kAsciiClasses = make_ascii_classes();

// Per-thread working buffers, so tokenizing allocates only while they grow.
struct Scratch {
  std::string word;
  std::vector<int32_t> code_points;
  std::vector<int32_t> transformed;
  // With spans: per byte of `word`, per entry of `code_points`.
  std::vector<TokenSpan> word_origin;
  std::vector<TokenSpan> origins;
  std::vector<TokenSpan> moved_origins;
  std::vector<unicode::CharChange> changes;
};
Scratch& scratch() {
  thread_local Scratch buffers;
  return buffers;
}

}  // namespace
namespace {

// Splits normalised text into words and each word into WordPiece ids. With
// `spans` set it also records each token's span in the text: every byte of
// the current word carries the span of the character it came from (HF's
// NormalizedString alignments), and a token spans from its first byte's
// character to its last's.
class WordPiecer {
 public:
  WordPiecer(const Tokenizer::Vocab& vocab, const TokenizerOptions& options, std::vector<int32_t>& out,
             std::vector<TokenSpan>* spans)
      : vocab_(vocab),
        out_(out),
        spans_(spans),
        lowercase_(options.lowercase),
        strip_accents_(options.strips_accents()),
        chinese_(options.tokenize_chinese_chars),
        buffers_(scratch()),
        word_(buffers_.word),
        word_origin_(buffers_.word_origin) {
    word_.clear();
    word_origin_.clear();
  }

  // Everything between two special tokens goes through here; `base` is where
  // `text` starts in the text being tokenized.
  void segment(std::string_view text, std::size_t base) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
    const std::size_t size = text.size();
    std::size_t position = 0;
    while (position < size) {
      const unsigned char byte = bytes[position];
      if (byte < 0x80) {
        switch (kAsciiClasses[byte]) {
          case AsciiClass::kDrop:
            break;
          case AsciiClass::kSpace:
            end_word();
            break;
          case AsciiClass::kPunctuation:
            end_word();
            out_.push_back(vocab_.ascii_char_id[byte]);
            if (spans_) spans_->push_back(span_at(base + position, 1));
            break;
          case AsciiClass::kWord:
            word_.push_back(lowercase_ && byte >= 'A' && byte <= 'Z' ? static_cast<char>(byte + 32)
                                                                     : static_cast<char>(byte));
            if (spans_) word_origin_.push_back(span_at(base + position, 1));
            ++word_chars_;
            break;
        }
        ++position;
      } else {
        // ASCII characters have combining class 0 and no decomposition, so a
        // run of non-ASCII bytes can be normalised on its own.
        std::size_t end = position + 1;
        while (end < size && bytes[end] >= 0x80) ++end;
        if (spans_) {
          non_ascii_run_aligned(bytes + position, end - position, base + position);
        } else {
          non_ascii_run(bytes + position, end - position);
        }
        position = end;
      }
    }
  }

  void finish() { end_word(); }

 private:
  static TokenSpan span_at(std::size_t begin, std::size_t length) {
    return TokenSpan{static_cast<int32_t>(begin), static_cast<int32_t>(begin + length)};
  }

  void non_ascii_run(const unsigned char* bytes, std::size_t size) {
    std::vector<int32_t>& code_points = buffers_.code_points;
    std::vector<int32_t>& transformed = buffers_.transformed;
    code_points.clear();
    // Clean text + CJK spacing (on the characters as written).
    std::size_t position = 0;
    while (position < size) {
      std::size_t length;
      const int32_t cp = unicode::decode_utf8(bytes + position, size - position, &length);
      position += length;
      if (cp < 0 || cp == 0xFFFD || unicode::is_control(cp)) continue;  // invalid bytes read as U+FFFD
      if (unicode::is_whitespace(cp)) {
        code_points.push_back(' ');
      } else if (chinese_ && unicode::is_chinese_char(cp)) {
        code_points.push_back(' ');
        code_points.push_back(cp);
        code_points.push_back(' ');
      } else {
        code_points.push_back(cp);
      }
    }
    // HF order: strip accents (NFD, drop Mn), then lowercase.
    if (strip_accents_) {
      transformed.clear();
      for (const int32_t cp : code_points) unicode::append_nfd(cp, transformed);
      unicode::canonical_order(transformed.data(), transformed.data() + transformed.size());
      code_points.clear();
      for (const int32_t cp : transformed) {
        if (!unicode::is_nonspacing_mark(cp)) code_points.push_back(cp);
      }
    }
    if (lowercase_) {
      transformed.clear();
      for (const int32_t cp : code_points) unicode::append_lowercase(cp, transformed);
      code_points.swap(transformed);
    }
    for (const int32_t cp : code_points) character(cp, TokenSpan{});
  }

  // non_ascii_run() carrying each character's span through the same steps,
  // with HF's alignment rules: a character the cleaning drops loses its span,
  // the spaces around a CJK ideograph and the extra characters of a
  // lowercase mapping take their character's, and NFD follows
  // NormalizedString::transform (data/unicode_text.h, apply_changes).
  void non_ascii_run_aligned(const unsigned char* bytes, std::size_t size, std::size_t base) {
    std::vector<int32_t>& code_points = buffers_.code_points;
    std::vector<TokenSpan>& origins = buffers_.origins;
    code_points.clear();
    origins.clear();
    std::size_t position = 0;
    while (position < size) {
      std::size_t length;
      const int32_t cp = unicode::decode_utf8(bytes + position, size - position, &length);
      const TokenSpan origin = span_at(base + position, length);
      position += length;
      if (cp < 0 || cp == 0xFFFD || unicode::is_control(cp)) continue;
      if (unicode::is_whitespace(cp)) {
        code_points.push_back(' ');
        origins.push_back(origin);
      } else if (chinese_ && unicode::is_chinese_char(cp)) {
        code_points.insert(code_points.end(), {' ', cp, ' '});
        origins.insert(origins.end(), 3, origin);
      } else {
        code_points.push_back(cp);
        origins.push_back(origin);
      }
    }
    if (strip_accents_) {
      std::vector<unicode::CharChange>& changes = buffers_.changes;
      changes.clear();
      unicode::decompose_with_changes(code_points.data(), code_points.size(), false, changes);
      std::vector<TokenSpan>& moved = buffers_.moved_origins;
      unicode::apply_changes(origins, changes, moved);
      code_points.clear();
      origins.clear();
      for (std::size_t i = 0; i < changes.size(); ++i) {
        if (unicode::is_nonspacing_mark(changes[i].code_point)) continue;
        code_points.push_back(changes[i].code_point);
        origins.push_back(moved[i]);
      }
    }
    std::vector<int32_t>& lowered = buffers_.transformed;
    for (std::size_t i = 0; i < code_points.size(); ++i) {
      if (!lowercase_) {
        character(code_points[i], origins[i]);
        continue;
      }
      lowered.clear();
      unicode::append_lowercase(code_points[i], lowered);
      for (const int32_t cp : lowered) character(cp, origins[i]);
    }
  }

  void character(int32_t cp, TokenSpan origin) {
    if (unicode::is_whitespace(cp)) {
      end_word();
      return;
    }
    if (unicode::is_punctuation(cp)) {
      end_word();
      if (spans_) spans_->push_back(origin);
      if (cp < 0x80) {
        out_.push_back(vocab_.ascii_char_id[cp]);
        return;
      }
      char encoded[4];
      const int length = unicode::encode_utf8(cp, encoded);
      const int32_t id = vocab_.whole.find(encoded, static_cast<std::size_t>(length));
      out_.push_back(id >= 0 ? id : vocab_.unk_id);
      return;
    }
    char encoded[4];
    const auto length = static_cast<std::size_t>(unicode::encode_utf8(cp, encoded));
    word_.append(encoded, length);
    if (spans_) word_origin_.insert(word_origin_.end(), length, origin);
    ++word_chars_;
  }

  void end_word() {
    if (word_.empty()) return;
    const std::size_t first = out_.size();
    word_piece(word_.data(), word_.size());
    if (spans_) {
      // Each piece spans its bytes' characters; an [UNK] the whole word.
      std::size_t start = 0;
      for (std::size_t i = first; i < out_.size(); ++i) {
        const std::size_t length = piece_bytes_[i - first];
        spans_->push_back(TokenSpan{word_origin_[start].begin, word_origin_[start + length - 1].end});
        start += length;
      }
    }
    word_.clear();
    word_origin_.clear();
    word_chars_ = 0;
  }

  // Greedy longest-match-first, as HF WordPiece::tokenize: the candidate end
  // moves back one whole character at a time; candidates longer than the
  // longest vocabulary entry are skipped since they cannot match. With spans,
  // piece_bytes_ gets each piece's byte length.
  void word_piece(const char* word, std::size_t size) {
    piece_bytes_.clear();
    if (word_chars_ > kMaxCharsPerWord) {
      out_.push_back(vocab_.unk_id);
      piece_bytes_.push_back(size);
      return;
    }
    const std::size_t first_piece = out_.size();
    std::size_t start = 0;
    while (start < size) {
      const wordpiece_detail::StringIdMap& map = start == 0 ? vocab_.whole : vocab_.continuation;
      std::size_t end = std::min(size, start + map.max_key_bytes());
      while (end < size && end > start && is_continuation_byte(word[end])) --end;
      int32_t id = -1;
      while (end > start) {
        id = map.find(word + start, end - start);
        if (id >= 0) break;
        --end;
        while (end > start && is_continuation_byte(word[end])) --end;
      }
      if (id < 0) {
        out_.resize(first_piece);
        out_.push_back(vocab_.unk_id);
        piece_bytes_.assign(1, size);
        return;
      }
      out_.push_back(id);
      if (spans_) piece_bytes_.push_back(end - start);
      start = end;
    }
  }

  static bool is_continuation_byte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

  const Tokenizer::Vocab& vocab_;
  std::vector<int32_t>& out_;
  std::vector<TokenSpan>* spans_;
  const bool lowercase_;
  const bool strip_accents_;
  const bool chinese_;
  Scratch& buffers_;
  std::string& word_;
  std::vector<TokenSpan>& word_origin_;
  std::vector<std::size_t> piece_bytes_;
  std::size_t word_chars_ = 0;
};

}  // namespace

Tokenizer::Tokenizer(std::shared_ptr<const Vocab> vocab, const TokenizerOptions& options)
    : vocab_(std::move(vocab)), core_(vocab_.get()), options_(options) {}

void wordpiece_tokenize(const Tokenizer::Vocab& vocab, const TokenizerOptions& options, std::string_view text,
                        std::vector<int32_t>& out, std::vector<TokenSpan>* spans) {
  WordPiecer pieces(vocab, options, out, spans);
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  std::size_t segment_start = 0;
  for (std::size_t position = 0; position < text.size();) {
    if (vocab.special_first_byte[bytes[position]]) {
      const std::pair<std::string, int32_t>* match = nullptr;
      for (const auto& special : vocab.specials) {
        if (text.compare(position, special.first.size(), special.first) == 0) {
          match = &special;
          break;
        }
      }
      if (match != nullptr) {
        pieces.segment(text.substr(segment_start, position - segment_start), segment_start);
        pieces.finish();
        out.push_back(match->second);
        if (spans)
          spans->push_back(TokenSpan{static_cast<int32_t>(position),
                                     static_cast<int32_t>(position + match->first.size())});
        position += match->first.size();
        segment_start = position;
        continue;
      }
    }
    ++position;
  }
  pieces.segment(text.substr(segment_start), segment_start);
  pieces.finish();
}

}  // namespace shardtrain
