// The WordPiece engine: HF's BertTokenizerFast pipeline (clean, CJK spacing,
// accents, basic split, WordPiece, pair truncation, special tokens) reads top
// to bottom in the order HF applies it, and each step is checked against HF's
// ids for every MRPC dev pair (tests/test_tokenizer.cpp); the Unicode tables
// are in unicode_text.cpp, reading folders and files in tokenizer_files.cpp,
// byte-level BPE in bpe_tokenizer.cpp.
#include "shardtrain/data/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "data/bpe_tokenizer.h"
#include "data/unicode_text.h"
#include "data/wordpiece_vocab.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain {

namespace {

// HF WordpieceTokenizer.max_input_chars_per_word.
constexpr std::size_t kMaxCharsPerWord = 100;

}  // namespace

// Named, not anonymous: Tokenizer::Vocab (a member of an exported class) holds
// StringIdMaps, and GCC warns (-Wsubobject-linkage) when such a member's type
// has internal linkage in a file that is not the main one, as in a unity batch.
namespace wordpiece_detail {

inline uint64_t hash_bytes(const char* data, std::size_t length) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (length * 0xFF51AFD7ED558CCDull);
  while (length >= 8) {
    uint64_t chunk;
    std::memcpy(&chunk, data, 8);
    h = (h ^ chunk) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
    data += 8;
    length -= 8;
  }
  uint64_t tail = 0;
  for (std::size_t k = 0; k < length; ++k) tail |= static_cast<uint64_t>(static_cast<unsigned char>(data[k])) << (8 * k);
  h = (h ^ tail) * 0x94D049BB133111EBull;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return h;
}

// Open-addressing map from byte string to id. The keys live in one arena, so a
// lookup with a string_view allocates nothing.
class StringIdMap {
 public:
  void build(const std::vector<std::pair<std::string_view, int32_t>>& entries) {
    std::size_t capacity = 16;
    while (capacity < entries.size() * 2) capacity *= 2;
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    arena_.clear();
    std::size_t arena_bytes = 0;
    for (const auto& entry : entries) arena_bytes += entry.first.size();
    arena_.reserve(arena_bytes);
    for (const auto& [key, id] : entries) {
      const uint64_t h = hash_bytes(key.data(), key.size());
      std::size_t index = h & mask_;
      while (true) {
        Slot& slot = slots_[index];
        if (slot.id < 0) {
          slot = Slot{static_cast<uint32_t>(h), static_cast<uint32_t>(key.size()),
                      static_cast<uint32_t>(arena_.size()), id};
          arena_.append(key);
          break;
        }
        if (matches(slot, static_cast<uint32_t>(h), key.data(), key.size())) {
          slot.id = id;  // a repeated token: the later line wins, as in HF
          break;
        }
        index = (index + 1) & mask_;
      }
      max_key_bytes_ = std::max(max_key_bytes_, key.size());
    }
  }

  int32_t find(const char* data, std::size_t length) const {
    const uint64_t h = hash_bytes(data, length);
    std::size_t index = h & mask_;
    while (true) {
      const Slot& slot = slots_[index];
      if (slot.id < 0) return -1;
      if (matches(slot, static_cast<uint32_t>(h), data, length)) return slot.id;
      index = (index + 1) & mask_;
    }
  }

  std::size_t max_key_bytes() const { return max_key_bytes_; }

 private:
  struct Slot {
    uint32_t hash = 0;
    uint32_t length = 0;
    uint32_t offset = 0;
    int32_t id = -1;  // -1 = empty
  };
  bool matches(const Slot& slot, uint32_t h, const char* data, std::size_t length) const {
    return slot.hash == h && slot.length == length &&
           std::memcmp(arena_.data() + slot.offset, data, length) == 0;
  }

  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  std::string arena_;
  std::size_t max_key_bytes_ = 0;
};

}  // namespace wordpiece_detail

namespace {

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
  std::vector<int32_t> ids_a;
  std::vector<int32_t> ids_b;
};
Scratch& scratch() {
  thread_local Scratch buffers;
  return buffers;
}

}  // namespace

struct Tokenizer::Vocab {
  std::string path;
  std::vector<std::string> tokens;
  wordpiece_detail::StringIdMap whole;         // every token
  wordpiece_detail::StringIdMap continuation;  // "##piece" tokens, keyed by "piece"
  int32_t unk_id = -1, cls_id = -1, sep_id = -1, pad_id = -1, mask_id = -1;
  // Tokens cut out of the raw text before normalisation, longest first.
  std::vector<std::pair<std::string, int32_t>> specials;
  std::array<bool, 256> special_first_byte{};
  // Id of each single ASCII character as a whole word (unk when absent).
  std::array<int32_t, 128> ascii_char_id{};
};

// `path` names the vocabulary in messages and vocab_path() (a file, or where
// in-memory text came from).
std::shared_ptr<Tokenizer::Vocab> wordpiece_parse_vocab(const std::string& text, const std::string& path,
                                                        const WordPieceSpecialNames& names) {
  auto vocab = std::make_shared<Tokenizer::Vocab>();
  vocab->path = path;
  std::size_t position = 0;
  if (text.compare(0, 3, "\xEF\xBB\xBF") == 0) position = 3;
  while (position < text.size()) {
    std::size_t end = text.find('\n', position);
    const std::size_t next = end == std::string::npos ? text.size() : end + 1;
    if (end == std::string::npos) end = text.size();
    // HF tokenizers trims trailing whitespace of each line (this also drops CR).
    std::size_t last = end;
    while (last > position && (text[last - 1] == '\r' || text[last - 1] == ' ' || text[last - 1] == '\t')) --last;
    vocab->tokens.emplace_back(text, position, last - position);
    position = next;
  }
  if (vocab->tokens.empty()) throw Error("vocabulary file '" + path + "' is empty");
  if (vocab->tokens.size() > static_cast<std::size_t>(INT32_MAX)) {
    throw Error("vocabulary file '" + path + "' has more tokens than int32 ids can address");
  }

  std::vector<std::pair<std::string_view, int32_t>> whole, continuation;
  whole.reserve(vocab->tokens.size());
  for (std::size_t id = 0; id < vocab->tokens.size(); ++id) {
    const std::string_view token = vocab->tokens[id];
    whole.emplace_back(token, static_cast<int32_t>(id));
    if (token.size() > 2 && token.compare(0, 2, "##") == 0) {
      continuation.emplace_back(token.substr(2), static_cast<int32_t>(id));
    }
  }
  vocab->whole.build(whole);
  vocab->continuation.build(continuation);

  auto require = [&](const std::string& name, const char* role) {
    const int32_t id = vocab->whole.find(name.data(), name.size());
    if (id < 0) {
      throw Error("vocabulary file '" + path + "' has no " + role + " token '" + name +
                  "' (BERT vocabularies need [UNK], [CLS], [SEP] and [PAD])");
    }
    return id;
  };
  vocab->unk_id = require(names.unk, "unknown");
  vocab->cls_id = require(names.cls, "classifier");
  vocab->sep_id = require(names.sep, "separator");
  vocab->pad_id = require(names.pad, "padding");
  vocab->mask_id = names.mask.empty() ? -1 : vocab->whole.find(names.mask.data(), names.mask.size());

  for (const std::string* name : {&names.unk, &names.cls, &names.sep, &names.pad, &names.mask}) {
    const int32_t id = name->empty() ? -1 : vocab->whole.find(name->data(), name->size());
    if (id < 0) continue;
    vocab->specials.emplace_back(*name, id);
    vocab->special_first_byte[static_cast<unsigned char>((*name)[0])] = true;
  }
  // Longest first, so the first match at a position is the leftmost-longest one.
  std::stable_sort(vocab->specials.begin(), vocab->specials.end(),
                   [](const auto& x, const auto& y) { return x.first.size() > y.first.size(); });

  for (int c = 0; c < 128; ++c) {
    const char character = static_cast<char>(c);
    const int32_t id = vocab->whole.find(&character, 1);
    vocab->ascii_char_id[c] = id >= 0 ? id : vocab->unk_id;
  }
  return vocab;
}

bool wordpiece_vocabulary_is_cased(const Tokenizer::Vocab& vocab) {
  for (const std::string& token : vocab.tokens) {
    bool special = false;
    for (const auto& entry : vocab.specials) special = special || entry.first == token;
    if (special) continue;
    const auto* bytes = reinterpret_cast<const unsigned char*>(token.data());
    std::size_t position = 0;
    while (position < token.size()) {
      std::size_t length;
      const int32_t cp = unicode::decode_utf8(bytes + position, token.size() - position, &length);
      if (cp >= 0 && unicode::changes_when_lowercased(cp)) return true;
      position += length;
    }
  }
  return false;
}

namespace {

// Splits normalised text into words and each word into WordPiece ids.
class WordPiecer {
 public:
  WordPiecer(const Tokenizer::Vocab& vocab, const TokenizerOptions& options, std::vector<int32_t>& out)
      : vocab_(vocab),
        out_(out),
        lowercase_(options.lowercase),
        strip_accents_(options.strips_accents()),
        chinese_(options.tokenize_chinese_chars),
        buffers_(scratch()),
        word_(buffers_.word) {
    word_.clear();
  }

  // Everything between two special tokens goes through here.
  void segment(std::string_view text) {
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
            break;
          case AsciiClass::kWord:
            word_.push_back(lowercase_ && byte >= 'A' && byte <= 'Z' ? static_cast<char>(byte + 32)
                                                                     : static_cast<char>(byte));
            ++word_chars_;
            break;
        }
        ++position;
      } else {
        // ASCII characters have combining class 0 and no decomposition, so a
        // run of non-ASCII bytes can be normalised on its own.
        std::size_t end = position + 1;
        while (end < size && bytes[end] >= 0x80) ++end;
        non_ascii_run(bytes + position, end - position);
        position = end;
      }
    }
  }

  void finish() { end_word(); }

 private:
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
    for (const int32_t cp : code_points) character(cp);
  }

  void character(int32_t cp) {
    if (unicode::is_whitespace(cp)) {
      end_word();
      return;
    }
    if (unicode::is_punctuation(cp)) {
      end_word();
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
    word_.append(encoded, static_cast<std::size_t>(unicode::encode_utf8(cp, encoded)));
    ++word_chars_;
  }

  void end_word() {
    if (word_.empty()) return;
    word_piece(word_.data(), word_.size());
    word_.clear();
    word_chars_ = 0;
  }

  // Greedy longest-match-first, as HF WordPiece::tokenize: the candidate end
  // moves back one whole character at a time; candidates longer than the
  // longest vocabulary entry are skipped since they cannot match.
  void word_piece(const char* word, std::size_t size) {
    if (word_chars_ > kMaxCharsPerWord) {
      out_.push_back(vocab_.unk_id);
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
        return;
      }
      out_.push_back(id);
      start = end;
    }
  }

  static bool is_continuation_byte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

  const Tokenizer::Vocab& vocab_;
  std::vector<int32_t>& out_;
  const bool lowercase_;
  const bool strip_accents_;
  const bool chinese_;
  Scratch& buffers_;
  std::string& word_;
  std::size_t word_chars_ = 0;
};

}  // namespace

Tokenizer::Tokenizer(std::shared_ptr<const Vocab> vocab, const TokenizerOptions& options)
    : vocab_(std::move(vocab)), options_(options) {}

Tokenizer::Tokenizer(std::shared_ptr<const Bpe> bpe) : bpe_(std::move(bpe)) {}

void Tokenizer::tokenize(std::string_view text, std::vector<int32_t>& out) const {
  if (bpe_) {
    bpe_->tokenize(text, out);
    return;
  }
  const Vocab& vocab = *vocab_;
  WordPiecer pieces(vocab, options_, out);
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
        pieces.segment(text.substr(segment_start, position - segment_start));
        pieces.finish();
        out.push_back(match->second);
        position += match->first.size();
        segment_start = position;
        continue;
      }
    }
    ++position;
  }
  pieces.segment(text.substr(segment_start));
  pieces.finish();
}

Encoding Tokenizer::encode(std::string_view text_a, std::optional<std::string_view> text_b,
                           int max_length) const {
  if (bpe_) return bpe_->encode(text_a, text_b, max_length);
  const int num_special = text_b ? 3 : 2;
  if (max_length < 0) throw Error(str_format("max_length must be >= 0 (0 = no truncation), got %d", max_length));
  if (max_length > 0 && max_length < num_special) {
    throw Error(str_format("max_length %d is too small: %s needs %d special tokens", max_length,
                           text_b ? "[CLS] A [SEP] B [SEP]" : "[CLS] A [SEP]", num_special));
  }
  Scratch& buffers = scratch();
  std::vector<int32_t>& ids_a = buffers.ids_a;
  std::vector<int32_t>& ids_b = buffers.ids_b;
  ids_a.clear();
  ids_b.clear();
  tokenize(text_a, ids_a);
  if (text_b) tokenize(*text_b, ids_b);

  std::size_t keep_a = ids_a.size(), keep_b = ids_b.size();
  if (max_length > 0) {
    const std::size_t budget = static_cast<std::size_t>(max_length - num_special);
    if (!text_b) {
      keep_a = std::min(keep_a, budget);
    } else {
      truncate_longest_first(keep_a, keep_b, budget);  // HF tokenizers truncate_encodings, LongestFirst
    }
  }

  Encoding encoding;
  const std::size_t total = keep_a + keep_b + static_cast<std::size_t>(num_special);
  encoding.input_ids.reserve(total);
  encoding.input_ids.push_back(vocab_->cls_id);
  encoding.input_ids.insert(encoding.input_ids.end(), ids_a.begin(), ids_a.begin() + keep_a);
  encoding.input_ids.push_back(vocab_->sep_id);
  const std::size_t length_a = encoding.input_ids.size();
  if (text_b) {
    encoding.input_ids.insert(encoding.input_ids.end(), ids_b.begin(), ids_b.begin() + keep_b);
    encoding.input_ids.push_back(vocab_->sep_id);
  }
  encoding.token_type_ids.assign(total, 1);
  std::fill(encoding.token_type_ids.begin(), encoding.token_type_ids.begin() + length_a, 0);
  return encoding;
}

int32_t Tokenizer::cls_id() const { return bpe_ ? bpe_->cls_id : vocab_->cls_id; }
int32_t Tokenizer::sep_id() const { return bpe_ ? bpe_->sep_id : vocab_->sep_id; }
int32_t Tokenizer::pad_id() const { return bpe_ ? bpe_->pad_id : vocab_->pad_id; }
int32_t Tokenizer::unk_id() const { return bpe_ ? bpe_->unk_id : vocab_->unk_id; }
int32_t Tokenizer::mask_id() const { return bpe_ ? bpe_->mask_id : vocab_->mask_id; }
int64_t Tokenizer::vocab_size() const {
  return static_cast<int64_t>(bpe_ ? bpe_->tokens.size() : vocab_->tokens.size());
}
const TokenizerOptions& Tokenizer::options() const { return options_; }
const std::string& Tokenizer::vocab_path() const { return bpe_ ? bpe_->source : vocab_->path; }
const std::string& Tokenizer::saved_files() const {
  static const std::string kNone;
  return saved_files_ ? *saved_files_ : kNone;
}
std::string Tokenizer::vocab_text() const {
  std::string text;
  if (bpe_) return text;
  for (const std::string& token : vocab_->tokens) {
    text += token;
    text += '\n';
  }
  return text;
}

const char* Tokenizer::type() const { return bpe_ ? "bpe" : "wordpiece"; }
int Tokenizer::num_special_tokens(bool pair) const { return bpe_ ? bpe_->num_special(pair) : (pair ? 3 : 2); }
int Tokenizer::max_token_type(bool pair) const { return bpe_ ? bpe_->max_type_id(pair) : (pair ? 1 : 0); }
int64_t Tokenizer::model_max_length() const { return model_max_length_; }

const std::string& Tokenizer::token(int32_t id) const {
  const std::vector<std::string>& tokens = bpe_ ? bpe_->tokens : vocab_->tokens;
  if (id < 0 || static_cast<std::size_t>(id) >= tokens.size()) {
    throw Error(str_format("token id %d is outside the vocabulary [0, %zu) of '%s'", id, tokens.size(),
                           vocab_path().c_str()));
  }
  return tokens[static_cast<std::size_t>(id)];
}

int32_t Tokenizer::token_to_id(std::string_view token) const {
  if (bpe_) {
    const auto it = bpe_->token_ids.find(std::string(token));
    return it == bpe_->token_ids.end() ? -1 : it->second;
  }
  return vocab_->whole.find(token.data(), token.size());
}

}  // namespace shardtrain
