#include "data/tokenizer/unicode_text.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <utility>

namespace shardtrain::unicode {

int32_t decode_utf8(const unsigned char* s, std::size_t n, std::size_t* length) {
  *length = 1;
  const unsigned lead = s[0];
  if (lead < 0x80) return static_cast<int32_t>(lead);
  // Consuming only the lead byte on failure is enough to match Python's
  // errors="replace": every byte a longer "maximal subpart" would swallow is a
  // continuation byte, which is invalid on its own, and all U+FFFD are dropped.
  std::size_t count;
  int32_t code_point;
  unsigned second_low = 0x80, second_high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    count = 2;
    code_point = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    count = 3;
    code_point = lead & 0x0F;
    if (lead == 0xE0) second_low = 0xA0;   // overlong
    if (lead == 0xED) second_high = 0x9F;  // surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    count = 4;
    code_point = lead & 0x07;
    if (lead == 0xF0) second_low = 0x90;   // overlong
    if (lead == 0xF4) second_high = 0x8F;  // above U+10FFFF
  } else {
    return -1;
  }
  if (n < count) return -1;
  for (std::size_t k = 1; k < count; ++k) {
    const unsigned byte = s[k];
    const unsigned low = k == 1 ? second_low : 0x80;
    const unsigned high = k == 1 ? second_high : 0xBF;
    if (byte < low || byte > high) return -1;
    code_point = (code_point << 6) | static_cast<int32_t>(byte & 0x3F);
  }
  *length = count;
  return code_point;
}

int encode_utf8(int32_t code_point, char* dst) {
  const auto cp = static_cast<uint32_t>(code_point);
  if (cp < 0x80) {
    dst[0] = static_cast<char>(cp);
    return 1;
  }
  if (cp < 0x800) {
    dst[0] = static_cast<char>(0xC0 | (cp >> 6));
    dst[1] = static_cast<char>(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    dst[0] = static_cast<char>(0xE0 | (cp >> 12));
    dst[1] = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    dst[2] = static_cast<char>(0x80 | (cp & 0x3F));
    return 3;
  }
  dst[0] = static_cast<char>(0xF0 | (cp >> 18));
  dst[1] = static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
  dst[2] = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
  dst[3] = static_cast<char>(0x80 | (cp & 0x3F));
  return 4;
}

bool is_control(int32_t code_point) {
  if (code_point == '\t' || code_point == '\n' || code_point == '\r') return false;
  // HF tokenizers' is_control is unicode_categories' is_other(): Cc, Cf and Co.
  // Unassigned (Cn) code points are not in it, unlike the Python tokenizer.
  const utf8proc_category_t category = utf8proc_category(code_point);
  return category == UTF8PROC_CATEGORY_CC || category == UTF8PROC_CATEGORY_CF ||
         category == UTF8PROC_CATEGORY_CO;
}

bool is_whitespace(int32_t code_point) {
  switch (code_point) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20:
    case 0x85: case 0xA0: case 0x1680:
    case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return code_point >= 0x2000 && code_point <= 0x200A;
  }
}

bool is_chinese_char(int32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

bool is_punctuation(int32_t cp) {
  if ((cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) ||
      (cp >= 123 && cp <= 126)) {
    return true;
  }
  if (cp < 0x80) return false;
  switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_PC: case UTF8PROC_CATEGORY_PD: case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE: case UTF8PROC_CATEGORY_PI: case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
      return true;
    default:
      return false;
  }
}

bool is_nonspacing_mark(int32_t code_point) {
  return code_point >= 0x300 && utf8proc_category(code_point) == UTF8PROC_CATEGORY_MN;
}

bool changes_when_lowercased(int32_t code_point) {
  return code_point == 0x130 || utf8proc_tolower(code_point) != code_point;
}

void append_nfd(int32_t code_point, std::vector<int32_t>& out) {
  if (code_point < 0xC0) {  // nothing below U+00C0 has a canonical decomposition
    out.push_back(code_point);
    return;
  }
  utf8proc_int32_t buffer[8];
  const utf8proc_ssize_t count =
      utf8proc_decompose_char(code_point, buffer, 8, UTF8PROC_DECOMPOSE, nullptr);
  if (count <= 0 || count > 8) {  // canonical decompositions are at most 4 long
    out.push_back(code_point);
    return;
  }
  out.insert(out.end(), buffer, buffer + count);
}

void canonical_order(int32_t* begin, int32_t* end) {
  auto combining_class = [](int32_t cp) {
    return cp < 0x300 ? 0 : static_cast<int>(utf8proc_get_property(cp)->combining_class);
  };
  // Insertion sort within each run of nonzero classes; runs are a few marks long.
  for (int32_t* it = begin; it != end; ++it) {
    const int cls = combining_class(*it);
    if (cls == 0) continue;
    int32_t* position = it;
    while (position != begin) {
      const int previous = combining_class(*(position - 1));
      if (previous == 0 || previous <= cls) break;
      std::swap(*position, *(position - 1));
      --position;
    }
  }
}

void append_lowercase(int32_t code_point, std::vector<int32_t>& out) {
  if (code_point == 0x130) {  // LATIN CAPITAL LETTER I WITH DOT ABOVE (SpecialCasing.txt)
    out.push_back(0x69);
    out.push_back(0x307);
    return;
  }
  out.push_back(utf8proc_tolower(code_point));
}

bool is_letter(int32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
      return true;
    default:
      return false;
  }
}

bool is_number(int32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

void normalize(std::string& text, NormalForm form) {
  bool ascii = true;
  for (const char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) return;  // every normal form of ASCII is itself
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::kNfc: options |= UTF8PROC_COMPOSE; break;
    case NormalForm::kNfd: options |= UTF8PROC_DECOMPOSE; break;
    case NormalForm::kNfkc: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormalForm::kNfkd: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* result = nullptr;
  const utf8proc_ssize_t length =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                   &result, static_cast<utf8proc_option_t>(options));
  if (length < 0) return;  // only invalid UTF-8 fails, and callers sanitize first
  text.assign(reinterpret_cast<const char*>(result), static_cast<std::size_t>(length));
  std::free(result);
}

namespace {

// sanitize_utf8's replacement pass; spans per output byte when `spans` is set.
void replace_invalid_utf8(std::string_view text, std::string& out, std::vector<TokenSpan>* spans) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  out.clear();
  if (spans) spans->clear();
  std::size_t position = 0;
  while (position < text.size()) {
    std::size_t length;
    const int32_t cp = decode_utf8(bytes + position, text.size() - position, &length);
    const std::size_t before = out.size();
    if (cp < 0) {
      // One U+FFFD per maximal subpart (Unicode 3.9 U+FFFD substitution, as
      // Python's errors="replace" and Rust's from_utf8_lossy): a valid lead byte
      // takes the continuation bytes that could still complete it.
      out += "\xEF\xBF\xBD";
      const unsigned lead = bytes[position];
      std::size_t count = lead >= 0xC2 && lead <= 0xDF ? 2 : lead >= 0xE0 && lead <= 0xEF ? 3
                          : lead >= 0xF0 && lead <= 0xF4 ? 4 : 1;
      std::size_t taken = 1;
      while (taken < count && position + taken < text.size()) {
        const unsigned byte = bytes[position + taken];
        unsigned low = 0x80, high = 0xBF;
        if (taken == 1) {
          if (lead == 0xE0) low = 0xA0;
          if (lead == 0xED) high = 0x9F;
          if (lead == 0xF0) low = 0x90;
          if (lead == 0xF4) high = 0x8F;
        }
        if (byte < low || byte > high) break;
        ++taken;
      }
      length = taken;
    } else {
      out.append(text.data() + position, length);
    }
    if (spans)
      spans->insert(spans->end(), out.size() - before,
                    TokenSpan{static_cast<int32_t>(position), static_cast<int32_t>(position + length)});
    position += length;
  }
}

bool is_valid_utf8(std::string_view text) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  std::size_t position = 0;
  while (position < text.size()) {
    if (bytes[position] < 0x80) {
      ++position;
      continue;
    }
    std::size_t length;
    if (decode_utf8(bytes + position, text.size() - position, &length) < 0) return false;
    position += length;
  }
  return true;
}

int combining_class(int32_t cp) {
  return cp < 0x300 ? 0 : static_cast<int>(utf8proc_get_property(cp)->combining_class);
}

// The primary composite of (first, second), or -1.
int32_t compose_pair(int32_t first, int32_t second) {
  utf8proc_int32_t buffer[2] = {first, second};
  const utf8proc_ssize_t length = utf8proc_normalize_utf32(buffer, 2, UTF8PROC_COMPOSE);
  return length == 1 ? buffer[0] : -1;
}

void decode_code_points(std::string_view text, std::vector<int32_t>& code_points) {
  code_points.clear();
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  for (std::size_t position = 0; position < text.size();) {
    std::size_t length;
    const int32_t cp = decode_utf8(bytes + position, text.size() - position, &length);
    code_points.push_back(cp < 0 ? 0xFFFD : cp);
    position += length;
  }
}

// One span per character from one span per byte (a character's bytes share it).
void character_spans_of(std::string_view text, const std::vector<TokenSpan>& byte_spans,
                        std::vector<TokenSpan>& char_spans) {
  char_spans.clear();
  for (std::size_t position = 0; position < text.size();) {
    char_spans.push_back(byte_spans[position]);
    position += static_cast<std::size_t>(utf8_length(static_cast<unsigned char>(text[position])));
  }
}

// Writes code points with their spans back as UTF-8 text and per-byte spans.
void encode_aligned(const std::vector<CharChange>& characters, const std::vector<TokenSpan>& spans,
                    std::string& text, std::vector<TokenSpan>& byte_spans) {
  text.clear();
  byte_spans.clear();
  for (std::size_t i = 0; i < characters.size(); ++i) {
    char encoded[4];
    const int length = encode_utf8(characters[i].code_point, encoded);
    text.append(encoded, static_cast<std::size_t>(length));
    byte_spans.insert(byte_spans.end(), static_cast<std::size_t>(length), spans[i]);
  }
}

}  // namespace

bool sanitize_utf8(std::string_view text, std::string& out) {
  if (is_valid_utf8(text)) return false;
  replace_invalid_utf8(text, out, nullptr);
  return true;
}

std::string_view valid_text(std::string_view text, std::string& storage, std::vector<TokenSpan>* byte_spans) {
  if (is_valid_utf8(text)) {
    if (byte_spans) character_spans(text, 0, *byte_spans);
    return text;
  }
  replace_invalid_utf8(text, storage, byte_spans);
  return storage;
}

void character_spans(std::string_view text, int32_t base, std::vector<TokenSpan>& byte_spans) {
  byte_spans.clear();
  byte_spans.reserve(text.size());
  for (std::size_t position = 0; position < text.size();) {
    const auto length = std::min<std::size_t>(
        static_cast<std::size_t>(utf8_length(static_cast<unsigned char>(text[position]))), text.size() - position);
    const TokenSpan span{base + static_cast<int32_t>(position), base + static_cast<int32_t>(position + length)};
    byte_spans.insert(byte_spans.end(), length, span);
    position += length;
  }
}

void decompose_with_changes(const int32_t* code_points, std::size_t count, bool compatibility,
                            std::vector<CharChange>& out) {
  // The crate's Decompositions iterator: a block starts at each starter
  // (class 0) and is sorted by class, stably, when the next starter arrives.
  std::vector<int> classes;
  std::size_t pending = out.size();
  auto sort_pending = [&] {
    std::vector<std::pair<int, CharChange>> block;
    for (std::size_t i = pending; i < out.size(); ++i) block.emplace_back(classes[i - pending], out[i]);
    std::stable_sort(block.begin(), block.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    for (std::size_t i = 0; i < block.size(); ++i) out[pending + i] = block[i].second;
    pending = out.size();
    classes.clear();
  };
  const int options = UTF8PROC_DECOMPOSE | (compatibility ? UTF8PROC_COMPAT : 0);
  for (std::size_t i = 0; i < count; ++i) {
    utf8proc_int32_t buffer[32];
    utf8proc_ssize_t length = utf8proc_decompose_char(code_points[i], buffer, 32,
                                                      static_cast<utf8proc_option_t>(options), nullptr);
    if (length <= 0 || length > 32) {
      buffer[0] = code_points[i];
      length = 1;
    }
    for (utf8proc_ssize_t k = 0; k < length; ++k) {
      const int cls = combining_class(buffer[k]);
      if (cls == 0) sort_pending();
      out.push_back(CharChange{buffer[k], k == 0 ? 0 : 1});
      classes.push_back(cls);
    }
  }
  sort_pending();
}

void compose_with_changes(const std::vector<CharChange>& decomposed, std::vector<CharChange>& out) {
  // The crate's Recompositions iterator, state for state.
  bool has_composee = false;
  CharChange composee{0, 0};
  int last_class = -1;  // -1: none since the composee
  std::vector<CharChange> blocked;
  auto flush_blocked = [&] {
    out.insert(out.end(), blocked.begin(), blocked.end());
    blocked.clear();
  };
  for (const CharChange& c : decomposed) {
    const int cls = combining_class(c.code_point);
    if (!has_composee) {
      if (cls != 0) {
        out.push_back(c);
        continue;
      }
      composee = c;
      has_composee = true;
      continue;
    }
    if (last_class < 0) {
      const int32_t composed = compose_pair(composee.code_point, c.code_point);
      if (composed >= 0) {
        composee = CharChange{composed, composee.change + c.change - 1};
        continue;
      }
      if (cls == 0) {
        out.push_back(composee);
        composee = c;
        continue;
      }
      blocked.push_back(c);
      last_class = cls;
      continue;
    }
    if (last_class >= cls) {
      if (cls == 0) {  // c is blocked from the composee and starts anew
        out.push_back(composee);
        flush_blocked();
        composee = c;
        last_class = -1;
        continue;
      }
      blocked.push_back(c);
      last_class = cls;
      continue;
    }
    const int32_t composed = compose_pair(composee.code_point, c.code_point);
    if (composed >= 0) {
      composee = CharChange{composed, composee.change + c.change - 1};
      continue;
    }
    blocked.push_back(c);
    last_class = cls;
  }
  if (has_composee) out.push_back(composee);
  flush_blocked();
}

void apply_changes(const std::vector<TokenSpan>& input, const std::vector<CharChange>& changes,
                   std::vector<TokenSpan>& output) {
  output.clear();
  const TokenSpan none = input.empty() ? TokenSpan{} : TokenSpan{input.front().begin, input.front().begin};
  std::size_t position = 0;
  for (const CharChange& c : changes) {
    if (c.change > 0) {
      output.push_back(position > 0 ? input[std::min(position, input.size()) - 1] : none);
      continue;
    }
    output.push_back(position < input.size() ? input[position] : input.empty() ? none : input.back());
    position += 1 + static_cast<std::size_t>(-c.change);
  }
}

void normalize_aligned(std::string& text, std::vector<TokenSpan>& byte_spans, NormalForm form) {
  bool ascii = true;
  for (const char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) return;
  std::vector<int32_t> code_points;
  decode_code_points(text, code_points);
  std::vector<TokenSpan> spans;
  character_spans_of(text, byte_spans, spans);
  const bool compatibility = form == NormalForm::kNfkc || form == NormalForm::kNfkd;
  std::vector<CharChange> decomposed, changes;
  decompose_with_changes(code_points.data(), code_points.size(), compatibility, decomposed);
  if (form == NormalForm::kNfc || form == NormalForm::kNfkc) {
    compose_with_changes(decomposed, changes);
  } else {
    changes.swap(decomposed);
  }
  std::vector<TokenSpan> moved;
  apply_changes(spans, changes, moved);
  encode_aligned(changes, moved, text, byte_spans);
}

void lowercase_aligned(std::string& text, std::vector<TokenSpan>& byte_spans) {
  std::vector<int32_t> code_points, lowered;
  decode_code_points(text, code_points);
  std::vector<TokenSpan> spans;
  character_spans_of(text, byte_spans, spans);
  std::vector<CharChange> characters;
  std::vector<TokenSpan> moved;
  for (std::size_t i = 0; i < code_points.size(); ++i) {
    lowered.clear();
    append_lowercase(code_points[i], lowered);
    for (const int32_t cp : lowered) {
      characters.push_back(CharChange{cp, 0});
      moved.push_back(spans[i]);
    }
  }
  encode_aligned(characters, moved, text, byte_spans);
}

}  // namespace shardtrain::unicode
