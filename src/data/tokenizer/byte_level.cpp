#include "data/tokenizer/byte_level.h"

#include "data/tokenizer/unicode_text.h"

namespace shardtrain::byte_level {

namespace {

std::array<int32_t, 256> make_byte_alphabet() {
  std::array<int32_t, 256> alphabet{};
  int32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    alphabet[static_cast<std::size_t>(b)] = printable ? b : next++;
  }
  return alphabet;
}

// Pre-tokenizer class of a character: \p{L}, \p{N}, \s, or anything else.
enum class CharClass : uint8_t { kLetter, kNumber, kSpace, kOther };

constexpr std::array<CharClass, 128> make_ascii_char_classes() {
  std::array<CharClass, 128> classes{};
  for (int c = 0; c < 128; ++c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      classes[c] = CharClass::kLetter;
    } else if (c >= '0' && c <= '9') {
      classes[c] = CharClass::kNumber;
    } else if (c == ' ' || (c >= 0x09 && c <= 0x0D)) {
      classes[c] = CharClass::kSpace;
    } else {
      classes[c] = CharClass::kOther;
    }
  }
  return classes;
}
constexpr std::array<CharClass, 128> kByteLevelAsciiClasses = make_ascii_char_classes();

// Class and byte length of the character at text[position] (position < size).
inline CharClass byte_level_class_at(const unsigned char* text, std::size_t size, std::size_t position,
                                     std::size_t* length) {
  const unsigned char byte = text[position];
  if (byte < 0x80) {
    *length = 1;
    return kByteLevelAsciiClasses[byte];
  }
  const int32_t cp = unicode::decode_utf8(text + position, size - position, length);
  if (cp < 0) return CharClass::kOther;  // callers pass valid UTF-8; stay total anyway
  if (unicode::is_whitespace(cp)) return CharClass::kSpace;
  if (unicode::is_letter(cp)) return CharClass::kLetter;
  if (unicode::is_number(cp)) return CharClass::kNumber;
  return CharClass::kOther;
}

}  // namespace

const std::array<int32_t, 256>& byte_to_code_point() {
  static const std::array<int32_t, 256> alphabet = make_byte_alphabet();
  return alphabet;
}

bool decode_token(std::string_view token, std::string& bytes) {
  static const std::array<int16_t, 512> inverse = [] {
    std::array<int16_t, 512> table{};
    table.fill(-1);
    const std::array<int32_t, 256>& alphabet = byte_to_code_point();
    for (int b = 0; b < 256; ++b) table[static_cast<std::size_t>(alphabet[static_cast<std::size_t>(b)])] =
        static_cast<int16_t>(b);
    return table;
  }();
  bytes.clear();
  const auto* data = reinterpret_cast<const unsigned char*>(token.data());
  std::size_t position = 0;
  while (position < token.size()) {
    std::size_t length;
    const int32_t cp = unicode::decode_utf8(data + position, token.size() - position, &length);
    if (cp < 0 || cp >= 512 || inverse[static_cast<std::size_t>(cp)] < 0) return false;
    bytes.push_back(static_cast<char>(inverse[static_cast<std::size_t>(cp)]));
    position += length;
  }
  return true;
}

std::string encode_bytes(std::string_view bytes) {
  std::string out;
  for (const char c : bytes) {
    char encoded[4];
    const int length = unicode::encode_utf8(byte_to_code_point()[static_cast<unsigned char>(c)], encoded);
    out.append(encoded, static_cast<std::size_t>(length));
  }
  return out;
}

void split_gpt2(std::string_view text, std::vector<std::pair<uint32_t, uint32_t>>& pieces) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t position = 0;
  while (position < n) {
    const std::size_t start = position;
    // 's 't 're 've 'm 'll 'd (case-sensitive, as the regex).
    if (s[position] == '\'' && position + 1 < n) {
      const unsigned char c1 = s[position + 1];
      std::size_t length = 0;
      if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
        length = 2;
      } else if (position + 2 < n) {
        const unsigned char c2 = s[position + 2];
        if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) length = 3;
      }
      if (length > 0) {
        pieces.emplace_back(static_cast<uint32_t>(start), static_cast<uint32_t>(start + length));
        position += length;
        continue;
      }
    }
    // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional U+0020, then a run of one class.
    std::size_t length;
    std::size_t run = position;
    CharClass run_class = byte_level_class_at(s, n, position, &length);
    if (s[position] == ' ' && position + 1 < n) {
      std::size_t next_length;
      const CharClass next = byte_level_class_at(s, n, position + 1, &next_length);
      if (next != CharClass::kSpace) {
        run = position + 1;
        run_class = next;
        length = next_length;
      }
    }
    if (run_class != CharClass::kSpace) {
      std::size_t end = run + length;
      while (end < n) {
        std::size_t next_length;
        if (byte_level_class_at(s, n, end, &next_length) != run_class) break;
        end += next_length;
      }
      pieces.emplace_back(static_cast<uint32_t>(start), static_cast<uint32_t>(end));
      position = end;
      continue;
    }
    // `\s+(?!\S)` then `\s+`: a whitespace run, less its last character when
    // a non-space follows and the run has more than one character.
    std::size_t end = position;
    std::size_t last_start = position;
    std::size_t count = 0;
    while (end < n) {
      std::size_t next_length;
      if (byte_level_class_at(s, n, end, &next_length) != CharClass::kSpace) break;
      last_start = end;
      end += next_length;
      ++count;
    }
    if (end < n && count > 1) end = last_start;
    pieces.emplace_back(static_cast<uint32_t>(start), static_cast<uint32_t>(end));
    position = end;
  }
}

namespace {

// Llama-3's contraction alternative, (?i:'s|'t|'re|'ve|'m|'ll|'d), at
// s[position] == '\'': its byte length, or 0. Case folding as the regex's:
// s also matches U+017F (long s).
std::size_t llama3_contraction(const unsigned char* s, std::size_t n, std::size_t position) {
  auto lower = [&](std::size_t i) -> int { return i < n && s[i] < 0x80 ? (s[i] | 0x20) : -1; };
  const int c1 = lower(position + 1);
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if (position + 2 < n && s[position + 1] == 0xC5 && s[position + 2] == 0xBF) return 3;  // 'ſ
  const int c2 = lower(position + 2);
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
  return 0;
}

bool is_newline(unsigned char c) { return c == '\r' || c == '\n'; }

}  // namespace

void split_llama3(std::string_view text, std::vector<std::pair<uint32_t, uint32_t>>& pieces) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  auto run_end = [&](std::size_t from, CharClass cls) {  // end of the run of `cls` starting at `from`
    std::size_t end = from, length;
    while (end < n && byte_level_class_at(s, n, end, &length) == cls) end += length;
    return end;
  };
  auto emit = [&](std::size_t begin, std::size_t end) {
    pieces.emplace_back(static_cast<uint32_t>(begin), static_cast<uint32_t>(end));
  };
  std::size_t position = 0;
  while (position < n) {
    const std::size_t start = position;
    if (s[position] == '\'') {
      if (const std::size_t length = llama3_contraction(s, n, position)) {
        emit(start, start + length);
        position += length;
        continue;
      }
    }
    std::size_t length;
    const CharClass cls = byte_level_class_at(s, n, position, &length);
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (cls == CharClass::kLetter) {
      position = run_end(position, CharClass::kLetter);
      emit(start, position);
      continue;
    }
    if (cls != CharClass::kNumber && !is_newline(s[position]) && position + length < n) {
      std::size_t next_length;
      if (byte_level_class_at(s, n, position + length, &next_length) == CharClass::kLetter) {
        position = run_end(position + length, CharClass::kLetter);
        emit(start, position);
        continue;
      }
    }
    // \p{N}{1,3}
    if (cls == CharClass::kNumber) {
      for (int count = 0; count < 3 && position < n; ++count) {
        std::size_t next_length;
        if (byte_level_class_at(s, n, position, &next_length) != CharClass::kNumber) break;
        position += next_length;
      }
      emit(start, position);
      continue;
    }
    // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
    std::size_t other = position;
    if (s[position] == ' ' && position + 1 < n) {
      std::size_t next_length;
      if (byte_level_class_at(s, n, position + 1, &next_length) == CharClass::kOther) other = position + 1;
    }
    if (byte_level_class_at(s, n, other, &length) == CharClass::kOther) {
      position = run_end(other, CharClass::kOther);
      while (position < n && is_newline(s[position])) ++position;
      emit(start, position);
      continue;
    }
    // Whitespace: `\s*[\r\n]+` (up to the run's last newline), else
    // `\s+(?!\S)` (the run, less its last character when a non-space follows
    // and it has more than one), else `\s+`.
    const std::size_t end = run_end(position, CharClass::kSpace);
    std::size_t last_newline = 0, last_start = position, count = 0;
    for (std::size_t i = position; i < end; i += length) {
      byte_level_class_at(s, n, i, &length);
      if (is_newline(s[i])) last_newline = i + 1;
      last_start = i;
      ++count;
    }
    if (last_newline > 0) {
      position = last_newline;
    } else {
      position = end < n && count > 1 ? last_start : end;
    }
    emit(start, position);
  }
}

}  // namespace shardtrain::byte_level
