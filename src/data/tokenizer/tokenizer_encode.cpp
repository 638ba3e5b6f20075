// What every engine shares once a text is tokens (include/shardtrain/data/
// tokenizer.h, docs/DESIGN.md "Tokenizers"): the template, longest_first
// truncation (either side), offsets and their ByteLevel trimming, pre-split
// words, and the accessors that dispatch to the engine.
#include <algorithm>

#include "data/tokenizer/bpe_tokenizer.h"
#include "data/tokenizer/spm_tokenizer.h"
#include "data/tokenizer/tokenizer_template.h"
#include "data/tokenizer/wordpiece_vocab.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain {

namespace {

// Per-thread buffers of encode(), so encoding allocates only while they grow.
struct EncodeScratch {
  std::vector<int32_t> ids_a, ids_b;
  std::vector<TokenSpan> spans_a, spans_b;
};
EncodeScratch& encode_scratch() {
  thread_local EncodeScratch buffers;
  return buffers;
}

}  // namespace

int Tokenizer::Template::num_special(bool is_pair) const {
  int count = 0;
  for (const TemplatePiece& piece : is_pair ? pair : single) {
    if (piece.sequence < 0) count += static_cast<int>(piece.ids.size());
  }
  return count;
}

int Tokenizer::Template::max_type_id(bool is_pair) const {
  int largest = 0;
  for (const TemplatePiece& piece : is_pair ? pair : single) largest = std::max<int>(largest, piece.type_id);
  return largest;
}

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

TokenRun TokenRun::kept(std::size_t keep, bool left) const {
  TokenRun run = *this;
  keep = std::min(keep, size);
  if (left) {
    const std::size_t skip = size - keep;
    run.ids += skip;
    if (run.spans) run.spans += skip;
    if (run.words) run.words += skip;
  }
  run.size = keep;
  return run;
}

Encoding assemble_template(const Tokenizer::Template& post, const TokenRun& a, const TokenRun* b,
                           EncodingParts parts) {
  Encoding encoding;
  const bool offsets = parts.offsets;
  const bool words = parts.word_ids;
  const bool sequence_ids = parts.sequence_ids;
  const std::size_t total =
      a.size + (b ? b->size : 0) + static_cast<std::size_t>(post.num_special(b != nullptr));
  encoding.input_ids.reserve(total);
  encoding.token_type_ids.reserve(total);
  for (const TemplatePiece& piece : b ? post.pair : post.single) {
    const TokenRun* run = piece.sequence == 0 ? &a : piece.sequence == 1 ? b : nullptr;
    const std::size_t count = run ? run->size : piece.ids.size();
    const int32_t* ids = run ? run->ids : piece.ids.data();
    encoding.input_ids.insert(encoding.input_ids.end(), ids, ids + count);
    encoding.token_type_ids.insert(encoding.token_type_ids.end(), count, piece.type_id);
    if (offsets) {
      if (run) {
        encoding.offsets.insert(encoding.offsets.end(), run->spans, run->spans + count);
      } else {
        encoding.offsets.insert(encoding.offsets.end(), count, TokenSpan{});
      }
    }
    if (words) {
      if (run) {
        encoding.word_ids.insert(encoding.word_ids.end(), run->words, run->words + count);
      } else {
        encoding.word_ids.insert(encoding.word_ids.end(), count, -1);
      }
    }
    if (sequence_ids) encoding.sequence_ids.insert(encoding.sequence_ids.end(), count, static_cast<int8_t>(piece.sequence));
  }
  return encoding;
}

template <class TextOf>
void Tokenizer::trim_kept(const std::vector<int32_t>& ids, std::vector<TokenSpan>& spans, std::size_t keep,
                          TextOf text_of, bool add_prefix_space) const {
  const std::size_t skip = truncation_left_ ? ids.size() - keep : 0;
  trim_byte_level_spans(ids.data() + skip, spans.data() + skip, keep, bpe_->leading_spaces, bpe_->trailing_spaces,
                        add_prefix_space || bpe_->post.trim_add_prefix_space, text_of);
}

void Tokenizer::tokenize_text(std::string_view text, std::vector<int32_t>& ids, std::vector<TokenSpan>* spans,
                              int prefix_space) const {
  if (bpe_) {
    bpe_->tokenize(text, ids, spans, prefix_space);
  } else if (spm_) {
    spm_->tokenize(text, ids, spans);  // Metaspace: every text and word has its "▁" already
  } else {
    wordpiece_tokenize(*vocab_, options_, text, ids, spans);
  }
}

void Tokenizer::tokenize(std::string_view text, std::vector<int32_t>& out) const { tokenize_text(text, out, nullptr, -1); }

void Tokenizer::tokenize_with_offsets(std::string_view text, std::vector<int32_t>& ids,
                                      std::vector<TokenSpan>& spans) const {
  const std::size_t first = ids.size();
  spans.resize(first);  // one span per id
  tokenize_text(text, ids, &spans, -1);
  if (bpe_ && bpe_->post.trim_offsets)
    trim_byte_level_spans(ids.data() + first, spans.data() + first, ids.size() - first, bpe_->leading_spaces,
                          bpe_->trailing_spaces, bpe_->post.trim_add_prefix_space,
                          [&](std::size_t) { return text; });
}

Encoding Tokenizer::encode_texts(std::string_view text_a, std::optional<std::string_view> text_b, int max_length,
                                 bool with_offsets) const {
  const Template& processor = core_->post;
  const int specials = processor.num_special(text_b.has_value());
  if (max_length < 0) throw Error(str_format("max_length must be >= 0 (0 = no truncation), got %d", max_length));
  if (max_length > 0 && max_length < specials) {
    throw Error(str_format("max_length %d is too small: the %s template of '%s' adds %d special tokens", max_length,
                           text_b ? "pair" : "single", vocab_path().c_str(), specials));
  }
  EncodeScratch& buffers = encode_scratch();
  buffers.ids_a.clear();
  buffers.ids_b.clear();
  buffers.spans_a.clear();
  buffers.spans_b.clear();
  tokenize_text(text_a, buffers.ids_a, with_offsets ? &buffers.spans_a : nullptr, -1);
  if (text_b) tokenize_text(*text_b, buffers.ids_b, with_offsets ? &buffers.spans_b : nullptr, -1);
  std::size_t keep_a = buffers.ids_a.size(), keep_b = buffers.ids_b.size();
  if (max_length > 0) {
    const auto budget = static_cast<std::size_t>(max_length - specials);
    if (!text_b) {
      keep_a = std::min(keep_a, budget);
    } else {
      truncate_longest_first(keep_a, keep_b, budget);  // HF tokenizers truncate_encodings, LongestFirst
    }
  }
  const TokenRun a = TokenRun{buffers.ids_a.data(), with_offsets ? buffers.spans_a.data() : nullptr, nullptr,
                              buffers.ids_a.size()}.kept(keep_a, truncation_left_);
  const TokenRun b = TokenRun{buffers.ids_b.data(), with_offsets ? buffers.spans_b.data() : nullptr, nullptr,
                              buffers.ids_b.size()}.kept(keep_b, truncation_left_);
  if (with_offsets && bpe_ && processor.trim_offsets) {
    // HF trims after truncation, each sequence on its own.
    trim_kept(buffers.ids_a, buffers.spans_a, keep_a, [&](std::size_t) { return text_a; });
    if (text_b) trim_kept(buffers.ids_b, buffers.spans_b, keep_b, [&](std::size_t) { return *text_b; });
  }
  return assemble_template(processor, a, text_b ? &b : nullptr, EncodingParts{with_offsets, false, with_offsets});
}

Encoding Tokenizer::encode(std::string_view text_a, std::optional<std::string_view> text_b, int max_length) const {
  return encode_texts(text_a, text_b, max_length, false);
}

Encoding Tokenizer::encode_with_offsets(std::string_view text_a, std::optional<std::string_view> text_b,
                                        int max_length) const {
  return encode_texts(text_a, text_b, max_length, true);
}

Encoding Tokenizer::encode_words(const std::vector<std::string_view>& words, int max_length,
                                 bool add_prefix_space) const {
  const Template& processor = core_->post;
  const int specials = processor.num_special(false);
  if (max_length < 0) throw Error(str_format("max_length must be >= 0 (0 = no truncation), got %d", max_length));
  if (max_length > 0 && max_length < specials)
    throw Error(str_format("max_length %d is too small: the single template of '%s' adds %d special tokens",
                           max_length, vocab_path().c_str(), specials));
  // HF encodes each word as its own sequence and merges them (offsets stay
  // relative to each word).
  std::vector<int32_t> ids;
  std::vector<TokenSpan> spans;
  std::vector<int32_t> word_ids;
  const int prefix_space = add_prefix_space ? 1 : -1;
  for (std::size_t w = 0; w < words.size(); ++w) {
    tokenize_text(words[w], ids, &spans, prefix_space);
    word_ids.resize(ids.size(), static_cast<int32_t>(w));
  }
  std::size_t keep = ids.size();
  if (max_length > 0) keep = std::min(keep, static_cast<std::size_t>(max_length - specials));
  const TokenRun run = TokenRun{ids.data(), spans.data(), word_ids.data(), ids.size()}.kept(keep, truncation_left_);
  if (bpe_ && processor.trim_offsets) {
    trim_kept(ids, spans, keep, [&](std::size_t i) { return words[static_cast<std::size_t>(run.words[i])]; },
              add_prefix_space);
  }
  return assemble_template(processor, run, nullptr, EncodingParts{true, true, true});
}

Encoding Tokenizer::apply_template(const std::vector<int32_t>& a, const std::vector<int32_t>* b) const {
  const TokenRun run_a{a.data(), nullptr, nullptr, a.size()};
  const TokenRun run_b{b ? b->data() : nullptr, nullptr, nullptr, b ? b->size() : 0};
  return assemble_template(core_->post, run_a, b ? &run_b : nullptr, EncodingParts{false, false, true});
}

bool Tokenizer::truncation_left() const { return truncation_left_; }

int32_t Tokenizer::cls_id() const { return core_->cls_id; }
int32_t Tokenizer::sep_id() const { return core_->sep_id; }
int32_t Tokenizer::pad_id() const { return core_->pad_id; }
int32_t Tokenizer::unk_id() const { return core_->unk_id; }
int32_t Tokenizer::mask_id() const { return core_->mask_id; }
int64_t Tokenizer::vocab_size() const { return static_cast<int64_t>(core_->tokens.size()); }
const TokenizerOptions& Tokenizer::options() const { return options_; }
const std::string& Tokenizer::vocab_path() const { return core_->source; }
const std::string& Tokenizer::saved_files() const {
  static const std::string kNone;
  return saved_files_ ? *saved_files_ : kNone;
}
std::string Tokenizer::vocab_text() const {
  std::string text;
  if (!vocab_) return text;
  for (const std::string& token : core_->tokens) {
    text += token;
    text += '\n';
  }
  return text;
}

const char* Tokenizer::type() const { return bpe_ ? "bpe" : spm_ ? "sentencepiece" : "wordpiece"; }
int Tokenizer::num_special_tokens(bool pair) const { return core_->post.num_special(pair); }
int Tokenizer::max_token_type(bool pair) const { return core_->post.max_type_id(pair); }
int64_t Tokenizer::model_max_length() const { return model_max_length_; }

const std::string& Tokenizer::token(int32_t id) const {
  const std::vector<std::string>& tokens = core_->tokens;
  if (id < 0 || static_cast<std::size_t>(id) >= tokens.size()) {
    throw Error(str_format("token id %d is outside the vocabulary [0, %zu) of '%s'", id, tokens.size(),
                           vocab_path().c_str()));
  }
  return tokens[static_cast<std::size_t>(id)];
}

int32_t Tokenizer::token_to_id(std::string_view token) const {
  if (bpe_ || spm_) {
    const auto& ids = bpe_ ? bpe_->token_ids : spm_->token_ids;
    const auto it = ids.find(std::string(token));
    return it == ids.end() ? -1 : it->second;
  }
  return wordpiece_token_id(*vocab_, token);
}

}  // namespace shardtrain
