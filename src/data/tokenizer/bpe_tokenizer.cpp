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
  std::string metaspace_text;               // one segment after Metaspace
  std::vector<TokenSpan> metaspace_spans;   // its spans, with spans
};
BpeScratch& bpe_scratch() {
  thread_local BpeScratch buffers;
  return buffers;
}

// HF NormalizedString::replace with a literal pattern (every occurrence, left
// to right): the new characters take the span of the last character they
// replace. `spans`: one per byte of `text`, or null.
void replace_all(std::string& text, std::vector<TokenSpan>* spans, std::string_view pattern, std::string_view content) {
  std::size_t found = text.find(pattern);
  if (found == std::string::npos) return;
  std::string out;
  std::vector<TokenSpan> out_spans;
  std::size_t copied = 0;
  for (; found != std::string::npos; found = text.find(pattern, copied)) {
    out.append(text, copied, found - copied);
    out.append(content);
    if (spans) {
      out_spans.insert(out_spans.end(), spans->begin() + static_cast<std::ptrdiff_t>(copied),
                       spans->begin() + static_cast<std::ptrdiff_t>(found));
      out_spans.insert(out_spans.end(), content.size(), (*spans)[found + pattern.size() - 1]);
    }
    copied = found + pattern.size();
  }
  out.append(text, copied, std::string::npos);
  text.swap(out);
  if (spans) {
    out_spans.insert(out_spans.end(), spans->begin() + static_cast<std::ptrdiff_t>(copied), spans->end());
    spans->swap(out_spans);
  }
}

// HF NormalizedString::prepend: nothing for empty text; the prefix takes the
// span of the first character.
void prepend_to(std::string& text, std::vector<TokenSpan>* spans, std::string_view prefix) {
  if (text.empty()) return;
  text.insert(0, prefix);
  if (spans) spans->insert(spans->begin(), prefix.size(), spans->front());
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
  for (const BpeNormalizerStep& step : normalizer) {
    switch (step.kind) {
      case BpeNormalizerStep::kReplace: replace_all(text, nullptr, step.pattern, step.content); break;
      case BpeNormalizerStep::kPrepend: prepend_to(text, nullptr, step.content); break;
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

void Tokenizer::Bpe::encode_word(std::string_view word, const TokenSpan* spans, Pass& pass) const {
  if (word.empty()) return;
  if (!pass.spans) {
    model->encode_word(word, pass.out);
    return;
  }
  std::vector<std::pair<uint32_t, uint32_t>>& ranges = bpe_scratch().token_ranges;
  ranges.clear();
  model->encode_word_ranges(word, pass.out, ranges);
  for (const auto& [first, last] : ranges) pass.spans->push_back(TokenSpan{spans[first].begin, spans[last - 1].end});
}

void Tokenizer::Bpe::metaspace_segment(std::string_view text, const TokenSpan* spans, Pass& pass, bool at_start) const {
  BpeScratch& buffers = bpe_scratch();
  std::string& out = buffers.metaspace_text;
  out.assign(text);
  std::vector<TokenSpan>* out_spans = spans ? &buffers.metaspace_spans : nullptr;
  if (out_spans) out_spans->assign(spans, spans + text.size());
  const std::string& mark = metaspace->replacement;
  replace_all(out, out_spans, " ", mark);
  const bool prepend = metaspace->prepend == MetaspaceSpec::Prepend::kAlways ||
                       (metaspace->prepend == MetaspaceSpec::Prepend::kFirst && at_start);
  if (prepend && out.compare(0, mark.size(), mark) != 0) prepend_to(out, out_spans, mark);
  const TokenSpan* word_spans = out_spans ? out_spans->data() : nullptr;
  if (!metaspace->split) {
    encode_word(out, word_spans, pass);
    return;
  }
  // Split MergedWithNext: a word starts at each replacement character.
  const std::string_view whole = out;
  std::size_t begin = 0;
  for (std::size_t next = whole.find(mark, 1); begin < whole.size(); next = whole.find(mark, next + mark.size())) {
    const std::size_t end = next == std::string_view::npos ? whole.size() : next;
    encode_word(whole.substr(begin, end - begin), word_spans ? word_spans + begin : nullptr, pass);
    begin = end;
  }
}

// `spans` (null when not wanted): one per byte of `text`, the span in the
// caller's text of the character the byte belongs to.
void Tokenizer::Bpe::pre_tokenized_segment(std::string_view text, const TokenSpan* spans, Pass& pass,
                                           bool at_start) const {
  if (text.empty()) return;
  if (!byte_level) {  // no pre-tokenizer: the segment is one word
    if (metaspace)
      metaspace_segment(text, spans, pass, at_start);
    else
      encode_word(text, spans, pass);
    return;
  }
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
  if (!use_regex && !llama3_split) {
    encode_word(segment, spans, pass);
    return;
  }
  std::vector<std::pair<uint32_t, uint32_t>>& pieces = buffers.pieces;
  pieces.clear();
  if (llama3_split)
    byte_level::split_llama3(segment, pieces);
  else
    byte_level::split_gpt2(segment, pieces);
  for (const auto& [begin, end] : pieces) encode_word(segment.substr(begin, end - begin), spans ? spans + begin : nullptr, pass);
}

void Tokenizer::Bpe::normalized_segment(std::string_view text, const TokenSpan* spans, Pass& pass,
                                        bool at_start) const {
  auto added = [&](std::string_view normalized, const TokenSpan* normalized_spans) {
    split_added_tokens(
        normalized, normalized_added,
        [&](std::string_view gap, std::size_t offset) {
          pre_tokenized_segment(gap, normalized_spans ? normalized_spans + offset : nullptr, pass,
                                at_start && offset == 0);
        },
        [&](int32_t id, std::size_t begin, std::size_t end) {
          pass.out.push_back(id);
          if (pass.spans) pass.spans->push_back(TokenSpan{normalized_spans[begin].begin, normalized_spans[end - 1].end});
        });
  };
  bool ascii = true;
  for (const char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  bool changes = false;  // the NF* forms of ASCII text are itself
  for (const BpeNormalizerStep& step : normalizer)
    changes = changes || step.kind == BpeNormalizerStep::kLowercase || step.kind == BpeNormalizerStep::kReplace ||
              step.kind == BpeNormalizerStep::kPrepend || !ascii;
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
  for (const BpeNormalizerStep& step : normalizer) {
    switch (step.kind) {
      case BpeNormalizerStep::kReplace: replace_all(normalized, &normalized_spans, step.pattern, step.content); break;
      case BpeNormalizerStep::kPrepend: prepend_to(normalized, &normalized_spans, step.content); break;
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
      [&](std::string_view gap, std::size_t offset) {
        normalized_segment(gap, base ? base + offset : nullptr, pass, offset == 0);
      },
      [&](int32_t id, std::size_t begin, std::size_t end) {
        out.push_back(id);
        if (spans) spans->push_back(TokenSpan{base[begin].begin, base[end - 1].end});
      });
}

}  // namespace shardtrain
