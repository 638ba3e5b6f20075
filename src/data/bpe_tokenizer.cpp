#include "data/bpe_tokenizer.h"

#include <algorithm>

#include "data/byte_level.h"
#include "data/unicode_text.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain {

namespace {

struct BpeScratch {
  std::string prefixed;    // one segment with the prefix space
  std::vector<std::pair<uint32_t, uint32_t>> pieces;
  std::vector<int32_t> ids_a;
  std::vector<int32_t> ids_b;
  std::vector<int32_t> lowered;
};
BpeScratch& bpe_scratch() {
  thread_local BpeScratch buffers;
  return buffers;
}

bool bpe_is_word_char(int32_t cp) { return cp == '_' || unicode::is_letter(cp) || unicode::is_number(cp); }

// The code point that ends at text[end - 1] (end > 0), and where it starts.
int32_t bpe_code_point_before(std::string_view text, std::size_t end, std::size_t* start) {
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

int32_t bpe_code_point_at(std::string_view text, std::size_t position, std::size_t* length) {
  return unicode::decode_utf8(reinterpret_cast<const unsigned char*>(text.data()) + position, text.size() - position,
                              length);
}

// Splits `text` around the added tokens of `tokens` (HF AddedVocabulary:
// leftmost-longest matches; single_word tokens only between non-word
// characters; lstrip / rstrip take the whitespace beside the match). Calls
// gap(segment) for the text between matches and token(id) for each match.
template <class Gap, class Token>
void bpe_split_added(std::string_view text, const BpeAddedSet& set, Gap gap, Token token) {
  if (set.empty()) {
    gap(text);
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
    const BpeAddedToken* match = nullptr;
    for (const BpeAddedToken& candidate : set.tokens) {  // longest first
      if (text.compare(position, candidate.content.size(), candidate.content) != 0) continue;
      if (candidate.single_word) {
        std::size_t unused;
        if (position > 0 && bpe_is_word_char(bpe_code_point_before(text, position, &unused))) continue;
        const std::size_t end = position + candidate.content.size();
        if (end < text.size() && bpe_is_word_char(bpe_code_point_at(text, end, &unused))) continue;
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
        const int32_t cp = bpe_code_point_before(text, start, &before);
        if (cp < 0 || !unicode::is_whitespace(cp) || before < segment_start) break;
        start = before;
      }
    }
    if (match->rstrip) {
      while (end < text.size()) {
        std::size_t length;
        const int32_t cp = bpe_code_point_at(text, end, &length);
        if (cp < 0 || !unicode::is_whitespace(cp)) break;
        end += length;
      }
    }
    if (start > segment_start) gap(text.substr(segment_start, start - segment_start));
    token(match->id);
    segment_start = end;
    position = end;
  }
  if (segment_start < text.size()) gap(text.substr(segment_start));
}

}  // namespace

void truncate_longest_first(std::size_t& keep_a, std::size_t& keep_b, std::size_t budget) {
  if (keep_a + keep_b <= budget) return;
  const bool swap = keep_a > keep_b;
  std::size_t shorter = swap ? keep_b : keep_a;
  std::size_t longer;
  if (shorter > budget) {
    longer = shorter;
  } else {
    longer = std::max(shorter, budget - shorter);
  }
  if (shorter + longer > budget) {
    shorter = budget / 2;
    longer = shorter + budget % 2;
  }
  keep_a = std::min(keep_a, swap ? longer : shorter);
  keep_b = std::min(keep_b, swap ? shorter : longer);
}

void BpeAddedSet::build(std::vector<BpeAddedToken> list) {
  list.erase(std::remove_if(list.begin(), list.end(), [](const BpeAddedToken& t) { return t.content.empty(); }),
             list.end());
  std::stable_sort(list.begin(), list.end(), [](const BpeAddedToken& x, const BpeAddedToken& y) {
    return x.content.size() > y.content.size();
  });
  tokens = std::move(list);
  first_two.assign(65536, false);
  std::fill(std::begin(first_one), std::end(first_one), false);
  for (const BpeAddedToken& t : tokens) {
    const auto first = static_cast<unsigned char>(t.content[0]);
    if (t.content.size() == 1) {
      first_one[first] = true;
    } else {
      first_two[first * 256u + static_cast<unsigned char>(t.content[1])] = true;
    }
  }
}

void Tokenizer::Bpe::finish() {
  std::vector<BpeAddedToken> raw, normalized;
  for (const BpeAddedToken& t : added) {
    if (t.normalized) {
      BpeAddedToken copy = t;
      normalize(copy.content);  // HF matches normalized added tokens in their normalized form
      normalized.push_back(std::move(copy));
    } else {
      raw.push_back(t);
    }
  }
  raw_added.build(std::move(raw));
  normalized_added.build(std::move(normalized));
}

void Tokenizer::Bpe::normalize(std::string& text) const {
  for (const BpeNormalizerStep step : normalizer) {
    switch (step) {
      case BpeNormalizerStep::kNfc: unicode::normalize(text, unicode::NormalForm::kNfc); break;
      case BpeNormalizerStep::kNfd: unicode::normalize(text, unicode::NormalForm::kNfd); break;
      case BpeNormalizerStep::kNfkc: unicode::normalize(text, unicode::NormalForm::kNfkc); break;
      case BpeNormalizerStep::kNfkd: unicode::normalize(text, unicode::NormalForm::kNfkd); break;
      case BpeNormalizerStep::kLowercase: {
        bool ascii = true;
        for (char& c : text) {
          if (static_cast<unsigned char>(c) >= 0x80) ascii = false;
          if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
        }
        if (ascii) break;
        BpeScratch& buffers = bpe_scratch();
        buffers.lowered.clear();
        const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
        for (std::size_t position = 0; position < text.size();) {
          std::size_t length;
          const int32_t cp = unicode::decode_utf8(bytes + position, text.size() - position, &length);
          unicode::append_lowercase(cp < 0 ? 0xFFFD : cp, buffers.lowered);
          position += length;
        }
        std::string lowered;
        lowered.reserve(text.size());
        for (const int32_t cp : buffers.lowered) {
          char encoded[4];
          lowered.append(encoded, static_cast<std::size_t>(unicode::encode_utf8(cp, encoded)));
        }
        text.swap(lowered);
        break;
      }
    }
  }
}

void Tokenizer::Bpe::pre_tokenized_segment(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  BpeScratch& buffers = bpe_scratch();
  std::string_view segment = text;
  if (add_prefix_space && text[0] != ' ') {
    buffers.prefixed.assign(1, ' ');
    buffers.prefixed.append(text);
    segment = buffers.prefixed;
  }
  if (!use_regex) {
    model->encode_word(segment, out);
    return;
  }
  std::vector<std::pair<uint32_t, uint32_t>>& pieces = buffers.pieces;
  pieces.clear();
  byte_level::split_gpt2(segment, pieces);
  for (const auto& [begin, end] : pieces) model->encode_word(segment.substr(begin, end - begin), out);
}

void Tokenizer::Bpe::normalized_segment(std::string_view text, std::vector<int32_t>& out) const {
  bool ascii = true;
  for (const char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  bool changes = false;  // the NF* forms of ASCII text are itself
  for (const BpeNormalizerStep step : normalizer) changes = changes || step == BpeNormalizerStep::kLowercase || !ascii;
  if (!changes) {
    bpe_split_added(text, normalized_added, [&](std::string_view gap) { pre_tokenized_segment(gap, out); },
                    [&](int32_t id) { out.push_back(id); });
    return;
  }
  std::string normalized(text);  // a copy: the scratch buffers are reused below
  normalize(normalized);
  bpe_split_added(normalized, normalized_added, [&](std::string_view gap) { pre_tokenized_segment(gap, out); },
                  [&](int32_t id) { out.push_back(id); });
}

void Tokenizer::Bpe::tokenize(std::string_view text, std::vector<int32_t>& out) const {
  std::string valid;
  if (unicode::sanitize_utf8(text, valid)) text = valid;
  bpe_split_added(text, raw_added, [&](std::string_view gap) { normalized_segment(gap, out); },
                  [&](int32_t id) { out.push_back(id); });
}

int Tokenizer::Bpe::num_special(bool is_pair) const {
  int count = 0;
  for (const BpeTemplatePiece& piece : is_pair ? pair : single) {
    if (piece.sequence < 0) count += static_cast<int>(piece.ids.size());
  }
  return count;
}

int Tokenizer::Bpe::max_type_id(bool is_pair) const {
  int largest = 0;
  for (const BpeTemplatePiece& piece : is_pair ? pair : single) largest = std::max<int>(largest, piece.type_id);
  return largest;
}

Encoding Tokenizer::Bpe::encode(std::string_view text_a, std::optional<std::string_view> text_b,
                                int max_length) const {
  const int specials = num_special(text_b.has_value());
  if (max_length < 0) throw Error(str_format("max_length must be >= 0 (0 = no truncation), got %d", max_length));
  if (max_length > 0 && max_length < specials) {
    throw Error(str_format("max_length %d is too small: the %s template of '%s' adds %d special tokens", max_length,
                           text_b ? "pair" : "single", source.c_str(), specials));
  }
  BpeScratch& buffers = bpe_scratch();
  std::vector<int32_t>& ids_a = buffers.ids_a;
  std::vector<int32_t>& ids_b = buffers.ids_b;
  ids_a.clear();
  ids_b.clear();
  tokenize(text_a, ids_a);
  if (text_b) tokenize(*text_b, ids_b);
  std::size_t keep_a = ids_a.size(), keep_b = ids_b.size();
  if (max_length > 0) {
    const std::size_t budget = static_cast<std::size_t>(max_length - specials);
    if (!text_b) {
      keep_a = std::min(keep_a, budget);
    } else {
      truncate_longest_first(keep_a, keep_b, budget);
    }
  }
  Encoding encoding;
  const std::size_t total = keep_a + keep_b + static_cast<std::size_t>(specials);
  encoding.input_ids.reserve(total);
  encoding.token_type_ids.reserve(total);
  for (const BpeTemplatePiece& piece : text_b ? pair : single) {
    const int32_t* begin = piece.ids.data();
    std::size_t count = piece.ids.size();
    if (piece.sequence == 0) {
      begin = ids_a.data();
      count = keep_a;
    } else if (piece.sequence == 1) {
      begin = ids_b.data();
      count = keep_b;
    }
    encoding.input_ids.insert(encoding.input_ids.end(), begin, begin + count);
    encoding.token_type_ids.insert(encoding.token_type_ids.end(), count, piece.type_id);
  }
  return encoding;
}

}  // namespace shardtrain
