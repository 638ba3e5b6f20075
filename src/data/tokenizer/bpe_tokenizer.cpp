#include "data/tokenizer/bpe_tokenizer.h"

#include <algorithm>

#include "data/tokenizer/byte_level.h"
#include "data/tokenizer/unicode_text.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain {

Tokenizer::Tokenizer(std::shared_ptr<const Bpe> bpe) : bpe_(std::move(bpe)), core_(bpe_.get()) {}

namespace {

struct BpeScratch {
  std::string prefixed;    // one segment with the prefix space
  std::vector<TokenSpan> segment_spans;  // its spans, with spans
  std::vector<std::pair<uint32_t, uint32_t>> pieces;
  std::vector<std::pair<uint32_t, uint32_t>> token_ranges;
  std::vector<int32_t> lowered;
};
BpeScratch& bpe_scratch() {
  thread_local BpeScratch buffers;
  return buffers;
}

}  // namespace

void Tokenizer::Bpe::finish() {
  std::vector<AddedToken> raw, normalized;
  for (const AddedToken& t : added) {
    if (t.normalized) {
      AddedToken copy = t;
      normalize(copy.content);  // HF matches normalized added tokens in their normalized form
      normalized.push_back(std::move(copy));
    } else {
      raw.push_back(t);
    }
  }
  raw_added.build(std::move(raw));
  normalized_added.build(std::move(normalized));
  // HF process_offsets counts Ġ (the byte alphabet's space) and whitespace.
  leading_spaces.assign(tokens.size(), 0);
  trailing_spaces.assign(tokens.size(), 0);
  std::vector<int32_t> code_points;
  for (std::size_t id = 0; id < tokens.size(); ++id) {
    const std::string& token = tokens[id];
    code_points.clear();
    for (std::size_t position = 0; position < token.size();) {
      std::size_t length;
      code_points.push_back(
          unicode::decode_utf8(reinterpret_cast<const unsigned char*>(token.data()) + position,
                               token.size() - position, &length));
      position += length;
    }
    auto is_space = [](int32_t cp) { return cp == 0x120 || (cp >= 0 && unicode::is_whitespace(cp)); };
    std::size_t lead = 0, trail = 0;
    while (lead < code_points.size() && is_space(code_points[lead])) ++lead;
    while (trail < code_points.size() && is_space(code_points[code_points.size() - 1 - trail])) ++trail;
    leading_spaces[id] = static_cast<uint16_t>(std::min<std::size_t>(lead, UINT16_MAX));
    trailing_spaces[id] = static_cast<uint16_t>(std::min<std::size_t>(trail, UINT16_MAX));
  }
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

// One tokenize() call: where ids (and spans) go, and the prefix-space rule.
struct Tokenizer::Bpe::Pass {
  std::vector<int32_t>& out;
  std::vector<TokenSpan>* spans;
  bool add_prefix_space;
};

// `spans` (null when not wanted): one per byte of `text`, the span in the
// caller's text of the character the byte belongs to.
void Tokenizer::Bpe::pre_tokenized_segment(std::string_view text, const TokenSpan* spans, Pass& pass) const {
  if (text.empty()) return;
  BpeScratch& buffers = bpe_scratch();
  std::string_view segment = text;
  std::vector<TokenSpan>& segment_spans = buffers.segment_spans;
  if (pass.add_prefix_space && text[0] != ' ') {
    buffers.prefixed.assign(1, ' ');
    buffers.prefixed.append(text);
    segment = buffers.prefixed;
    if (spans) {
      // HF prepend: the space takes the first character's span.
      segment_spans.assign(1, spans[0]);
      segment_spans.insert(segment_spans.end(), spans, spans + text.size());
      spans = segment_spans.data();
    }
  }
  auto encode = [&](std::size_t begin, std::size_t end) {
    if (!spans) {
      model->encode_word(segment.substr(begin, end - begin), pass.out);
      return;
    }
    std::vector<std::pair<uint32_t, uint32_t>>& ranges = buffers.token_ranges;
    ranges.clear();
    model->encode_word_ranges(segment.substr(begin, end - begin), pass.out, ranges);
    for (const auto& [first, last] : ranges)
      pass.spans->push_back(TokenSpan{spans[begin + first].begin, spans[begin + last - 1].end});
  };
  if (!use_regex && !llama3_split) {
    encode(0, segment.size());
    return;
  }
  std::vector<std::pair<uint32_t, uint32_t>>& pieces = buffers.pieces;
  pieces.clear();
  if (llama3_split)
    byte_level::split_llama3(segment, pieces);
  else
    byte_level::split_gpt2(segment, pieces);
  for (const auto& [begin, end] : pieces) encode(begin, end);
}

void Tokenizer::Bpe::normalized_segment(std::string_view text, const TokenSpan* spans, Pass& pass) const {
  auto added = [&](std::string_view normalized, const TokenSpan* normalized_spans) {
    split_added_tokens(
        normalized, normalized_added,
        [&](std::string_view gap, std::size_t offset) {
          pre_tokenized_segment(gap, normalized_spans ? normalized_spans + offset : nullptr, pass);
        },
        [&](int32_t id, std::size_t begin, std::size_t end) {
          pass.out.push_back(id);
          if (pass.spans) pass.spans->push_back(TokenSpan{normalized_spans[begin].begin, normalized_spans[end - 1].end});
        });
  };
  bool ascii = true;
  for (const char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  bool changes = false;  // the NF* forms of ASCII text are itself
  for (const BpeNormalizerStep step : normalizer) changes = changes || step == BpeNormalizerStep::kLowercase || !ascii;
  if (!changes) {
    added(text, spans);
    return;
  }
  std::string normalized(text);  // a copy: the scratch buffers are reused below
  if (!spans) {
    normalize(normalized);
    added(normalized, nullptr);
    return;
  }
  std::vector<TokenSpan> normalized_spans(spans, spans + text.size());
  for (const BpeNormalizerStep step : normalizer) {
    switch (step) {
      case BpeNormalizerStep::kNfc: unicode::normalize_aligned(normalized, normalized_spans, unicode::NormalForm::kNfc); break;
      case BpeNormalizerStep::kNfd: unicode::normalize_aligned(normalized, normalized_spans, unicode::NormalForm::kNfd); break;
      case BpeNormalizerStep::kNfkc: unicode::normalize_aligned(normalized, normalized_spans, unicode::NormalForm::kNfkc); break;
      case BpeNormalizerStep::kNfkd: unicode::normalize_aligned(normalized, normalized_spans, unicode::NormalForm::kNfkd); break;
      case BpeNormalizerStep::kLowercase: unicode::lowercase_aligned(normalized, normalized_spans); break;
    }
  }
  added(normalized, normalized_spans.data());
}

void Tokenizer::Bpe::tokenize(std::string_view text, std::vector<int32_t>& out, std::vector<TokenSpan>* spans,
                              int prefix_space) const {
  Pass pass{out, spans, prefix_space < 0 ? add_prefix_space : prefix_space != 0};
  std::string valid;
  std::vector<TokenSpan> text_spans;  // with spans: per byte of the text worked on
  text = unicode::valid_text(text, valid, spans ? &text_spans : nullptr);
  const TokenSpan* base = spans ? text_spans.data() : nullptr;
  split_added_tokens(
      text, raw_added,
      [&](std::string_view gap, std::size_t offset) { normalized_segment(gap, base ? base + offset : nullptr, pass); },
      [&](int32_t id, std::size_t begin, std::size_t end) {
        out.push_back(id);
        if (spans) spans->push_back(TokenSpan{base[begin].begin, base[end - 1].end});
      });
}

}  // namespace shardtrain
