// The SentencePiece engine (data/spm_tokenizer.h, docs/DESIGN.md
// "SentencePiece"). libsentencepiece is the reference implementation of the
// Unigram / BPE segmentation and of the charsmap normalizer, so the ids are
// its ids; what this file adds is HF's structure around it and speed.
//
// Speed: text is cut at spaces and encoded chunk by chunk, each chunk
// cached per thread (spm_chunks.cpp).
//
// Offsets follow HF's Metaspace alignment: a token that starts with "▁"
// spans from the last whitespace character before its text (the space that
// became the "▁"; for a run of spaces HF's Replace keeps the last), except
// for leading whitespace that the normalizer strips (DeBERTa's Strip; XLM-R's
// converter strips only the right), where the "▁" is the dummy prefix and
// takes the first character's span.
#include "data/tokenizer/spm_tokenizer.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "data/tokenizer/sentencepiece_module.h"
#include "data/tokenizer/unicode_text.h"
#include "data/tokenizer/word_cache.h"
#include "shardtrain/core/check.h"

namespace shardtrain {

namespace {

constexpr std::string_view kMeta = "\xE2\x96\x81";  // U+2581, SentencePiece's space

struct SpmScratch {
  std::string lowered;
  std::vector<TokenSpan> lowered_spans;
  std::vector<int32_t> values;
};
SpmScratch& spm_scratch() {
  thread_local SpmScratch buffers;
  return buffers;
}

// Byte length of the whitespace character that ends at text[end - 1], or 0.
std::size_t whitespace_before(std::string_view text, std::size_t end) {
  if (end == 0) return 0;
  std::size_t begin = end - 1;
  while (begin > 0 && end - begin < 4 && (static_cast<unsigned char>(text[begin]) & 0xC0) == 0x80) --begin;
  std::size_t length;
  const int32_t cp =
      unicode::decode_utf8(reinterpret_cast<const unsigned char*>(text.data()) + begin, end - begin, &length);
  return cp >= 0 && begin + length == end && unicode::is_whitespace(cp) ? length : 0;
}

// Byte length of the whitespace character at text[position], or 0.
std::size_t whitespace_at(std::string_view text, std::size_t position) {
  if (position >= text.size()) return 0;
  std::size_t length;
  const int32_t cp = unicode::decode_utf8(reinterpret_cast<const unsigned char*>(text.data()) + position,
                                          text.size() - position, &length);
  return cp >= 0 && unicode::is_whitespace(cp) ? length : 0;
}

// libshardtrain_sentencepiece.so, loaded once (data/sentencepiece_module.h).
struct SentencePieceModule {
  decltype(&shardtrain_spm_load) load = nullptr;
  decltype(&shardtrain_spm_encode_normalized) encode = nullptr;
  decltype(&shardtrain_spm_free) free = nullptr;
  std::string error;  // why it could not be loaded
};

std::string sentencepiece_module_beside_program() {
  char path[4096];
  const ssize_t length = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (length <= 0) return "";
  std::string exe(path, static_cast<std::size_t>(length));
  const std::size_t slash = exe.rfind('/');
  return slash == std::string::npos ? "" : exe.substr(0, slash + 1) + "libshardtrain_sentencepiece.so";
}

const SentencePieceModule& sentencepiece_module() {
  static SentencePieceModule module;
  static std::once_flag once;
  std::call_once(once, [] {
#if defined(SHARDTRAIN_SANITIZED)
    // The sanitizer runtimes refuse RTLD_DEEPBIND, and without it the module's
    // protobuf would bind to the process's (see the header).
    module.error = "SentencePiece tokenizers are not available in a sanitizer build (the module needs RTLD_DEEPBIND)";
    return;
#else
    std::vector<std::string> candidates;
    if (const char* configured = std::getenv("SHARDTRAIN_SENTENCEPIECE_MODULE")) candidates.push_back(configured);
    candidates.push_back(SHARDTRAIN_SENTENCEPIECE_MODULE_PATH);
    candidates.push_back(sentencepiece_module_beside_program());
    std::string tried;
    for (const std::string& path : candidates) {
      if (path.empty() || ::access(path.c_str(), R_OK) != 0) {
        tried += (tried.empty() ? "" : ", ") + path;
        continue;
      }
      void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (handle == nullptr) {
        module.error = "cannot load the SentencePiece module '" + path + "': " + ::dlerror();
        return;
      }
      module.load = reinterpret_cast<decltype(&shardtrain_spm_load)>(::dlsym(handle, "shardtrain_spm_load"));
      module.encode = reinterpret_cast<decltype(&shardtrain_spm_encode_normalized)>(
          ::dlsym(handle, "shardtrain_spm_encode_normalized"));
      module.free = reinterpret_cast<decltype(&shardtrain_spm_free)>(::dlsym(handle, "shardtrain_spm_free"));
      if (!module.load || !module.encode || !module.free) {
        module.load = nullptr;
        module.error = "'" + path + "' is not shardtrain's SentencePiece module (a symbol is missing)";
      }
      return;  // loaded for good: the tokenizers it serves live as long as the process
    }
    module.error = "the SentencePiece module libshardtrain_sentencepiece.so was not found (tried " + tried +
                   "); build the shardtrain_sentencepiece target (scripts/setup.sh does), or point "
                   "SHARDTRAIN_SENTENCEPIECE_MODULE at it";
#endif
  });
  return module;
}

}  // namespace

void Tokenizer::Spm::ProcessorDeleter::operator()(ShardtrainSpm* processor) const {
  if (processor != nullptr) sentencepiece_module().free(processor);
}

Tokenizer::Tokenizer(std::shared_ptr<const Spm> spm) : spm_(std::move(spm)), core_(spm_.get()) {}

Tokenizer::Spm::Spm() : cache_owner(WordCache::new_owner()) {}
Tokenizer::Spm::~Spm() = default;

void Tokenizer::Spm::load(const std::string& model, const std::string& file) {
  const SentencePieceModule& module = sentencepiece_module();
  if (module.load == nullptr) throw Error("'" + file + "': " + module.error);
  char error[512] = "";
  processor.reset(module.load(model.data(), model.size(), error, sizeof(error)));
  if (!processor) throw Error("'" + file + "': SentencePiece cannot load the model: " + error);
}

// SentencePiece's pieces of one unit as (id, begin, end) triples, the
// offsets in bytes of `unit`, appended to `values`; with `normalized`, the
// text its model segmented.
void Tokenizer::Spm::encode_unit(std::string_view unit, std::vector<int32_t>& values, std::string* normalized) const {
  const std::size_t first = values.size();
  std::size_t capacity = unit.size() + 2;  // pieces: at most one per byte, and "▁"
  std::size_t normalized_capacity = normalized ? 3 * unit.size() + 16 : 0;
  char error[512] = "";
  while (true) {
    values.resize(first + 3 * capacity);
    if (normalized) normalized->resize(normalized_capacity);
    std::size_t normalized_bytes = 0;
    const long count = sentencepiece_module().encode(
        processor.get(), unit.data(), unit.size(), values.data() + first, capacity,
        normalized ? normalized->data() : nullptr, normalized_capacity, &normalized_bytes, error, sizeof(error));
    if (count < 0) throw Error("'" + source + "': SentencePiece cannot encode a text: " + error);
    const bool fits = normalized_bytes <= normalized_capacity;
    if (static_cast<std::size_t>(count) <= capacity && fits) {
      values.resize(first + 3 * static_cast<std::size_t>(count));
      if (normalized) normalized->resize(normalized_bytes);
      break;
    }
    capacity = std::max(capacity, static_cast<std::size_t>(count));
    normalized_capacity = std::max(normalized_capacity, normalized_bytes);
  }
  for (std::size_t k = first; k < values.size(); k += 3) {
    const auto id = static_cast<uint32_t>(values[k]);
    values[k] = id < spm_to_id.size() ? spm_to_id[id] : unk_id;
    values[k + 1] = std::min<int32_t>(values[k + 1], static_cast<int32_t>(unit.size()));
    values[k + 2] = std::min<int32_t>(values[k + 2], static_cast<int32_t>(unit.size()));
  }
  // Byte fallback: SentencePiece gives a character's span to its first byte
  // piece and none to the rest; HF gives every byte piece the span of the
  // unknown text they spell. So a run of byte pieces shares the run's span.
  for (std::size_t k = first; k < values.size();) {
    if (!is_byte_piece(values[k])) {
      k += 3;
      continue;
    }
    std::size_t run_end = k;
    int32_t begin = values[k + 1], end = values[k + 2];
    while (run_end < values.size() && is_byte_piece(values[run_end])) {
      if (values[run_end + 2] > values[run_end + 1]) {
        begin = std::min(begin, values[run_end + 1]);
        end = std::max(end, values[run_end + 2]);
      }
      run_end += 3;
    }
    for (std::size_t j = k; j < run_end; j += 3) {
      values[j + 1] = begin;
      values[j + 2] = std::max(begin, end);
    }
    k = run_end;
  }
}

// The pieces of one unit (bytes [unit_begin, ..) of `text`, within the
// segment [begin, end)) appended to the pass, with spans when asked.
void Tokenizer::Spm::emit(std::string_view text, std::size_t unit_begin, const int32_t* triples,
                          std::size_t num_triples, std::size_t begin, std::size_t end, bool gap_start,
                          Pass& pass) const {
  for (std::size_t k = 0; k < 3 * num_triples; k += 3) {
    const int32_t id = triples[k];
    pass.out.push_back(id);
    if (!pass.spans) continue;
    std::size_t token_begin = unit_begin + static_cast<std::size_t>(triples[k + 1]);
    std::size_t token_end = unit_begin + static_cast<std::size_t>(triples[k + 2]);
    if (static_cast<std::size_t>(id) < meta_first.size() && meta_first[static_cast<std::size_t>(id)]) {
      // HF's "▁": the last whitespace character before the token's text,
      // unless that whitespace leads the segment and the normalizer strips it.
      std::size_t content = token_begin;
      while (content < token_end) {
        const std::size_t length = whitespace_at(text, content);
        if (length == 0) break;
        content += length;
      }
      std::size_t run = content;
      while (run > begin) {
        const std::size_t length = whitespace_before(text, run);
        if (length == 0) break;
        run -= length;
      }
      const bool stripped = strip_left && gap_start && run == 0;
      token_begin = run < content && !stripped ? content - whitespace_before(text, content) : content;
      if (token_end <= token_begin && tokens[static_cast<std::size_t>(id)] == kMeta && token_begin < end) {
        // A lone dummy-prefix "▁" takes the next character's span.
        std::size_t length;
        unicode::decode_utf8(reinterpret_cast<const unsigned char*>(text.data()) + token_begin,
                             text.size() - token_begin, &length);
        token_end = token_begin + length;
      }
      token_end = std::max(token_end, token_begin);
    }
    const TokenSpan* origin = pass.text_spans;
    if (token_end > token_begin) {
      pass.spans->push_back(TokenSpan{origin[token_begin].begin, origin[token_end - 1].end});
    } else {
      const int32_t at = token_begin < text.size() ? origin[token_begin].begin
                         : text.empty()            ? 0
                                                   : origin[text.size() - 1].end;
      pass.spans->push_back(TokenSpan{at, at});
    }
  }
}

void Tokenizer::Spm::encode_whole(std::string_view text, std::size_t begin, std::size_t end, bool gap_start,
                                  Pass& pass) const {
  std::vector<int32_t>& values = spm_scratch().values;
  values.clear();
  encode_unit(text.substr(begin, end - begin), values, nullptr);
  emit(text, begin, values.data(), values.size() / 3, begin, end, gap_start, pass);
}

// Text between added tokens: lowercased, split at punctuation (DeBERTa), encoded.
void Tokenizer::Spm::segment(std::string_view text, const TokenSpan* spans, Pass& pass) const {
  SpmScratch& buffers = spm_scratch();
  std::string_view normalized = text;
  const TokenSpan* normalized_spans = spans;
  if (lowercase) {
    buffers.lowered.assign(text.data(), text.size());
    if (spans) {
      buffers.lowered_spans.assign(spans, spans + text.size());
    } else {
      unicode::character_spans(text, 0, buffers.lowered_spans);  // unused: lowercase_aligned needs spans
    }
    unicode::lowercase_aligned(buffers.lowered, buffers.lowered_spans);
    normalized = buffers.lowered;
    normalized_spans = spans ? buffers.lowered_spans.data() : nullptr;
  }
  pass.text = normalized;
  pass.text_spans = normalized_spans;
  if (!split_by_punct) {
    piece(normalized, 0, normalized.size(), true, pass);
    return;
  }
  // DeBERTa's split_by_punct: every punctuation character on its own, the
  // runs between them as they are (spaces included), each encoded alone.
  const auto* bytes = reinterpret_cast<const unsigned char*>(normalized.data());
  std::size_t run = 0, position = 0;
  while (position < normalized.size()) {
    std::size_t length;
    const int32_t cp = unicode::decode_utf8(bytes + position, normalized.size() - position, &length);
    if (cp >= 0 && unicode::is_punctuation(cp)) {
      if (position > run) piece(normalized, run, position, run == 0, pass);
      piece(normalized, position, position + length, position == 0, pass);
      run = position + length;
    }
    position += length;
  }
  if (normalized.size() > run) piece(normalized, run, normalized.size(), run == 0, pass);
}

void Tokenizer::Spm::tokenize(std::string_view text, std::vector<int32_t>& out, std::vector<TokenSpan>* spans) const {
  std::string valid;
  std::vector<TokenSpan> text_spans;  // with spans: per byte of the text worked on
  text = unicode::valid_text(text, valid, spans ? &text_spans : nullptr);
  Pass pass{out, spans, std::string_view(), nullptr};
  const TokenSpan* base = spans ? text_spans.data() : nullptr;
  split_added_tokens(
      text, added,
      [&](std::string_view gap, std::size_t offset) { segment(gap, base ? base + offset : nullptr, pass); },
      [&](int32_t id, std::size_t begin, std::size_t end) {
        out.push_back(id);
        if (spans) spans->push_back(TokenSpan{base[begin].begin, base[end - 1].end});
      });
}

}  // namespace shardtrain
