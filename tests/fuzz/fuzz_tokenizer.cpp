// libFuzzer target: the tokenizers on hostile vocabularies, configs and
// arbitrary bytes. Input sections (separated by "\n=====\n"): a vocabulary
// file, its tokenizer_config.json, text a, text b. The first byte of text a
// picks max_length. Every id must lie in the vocabulary and encode() must keep
// to max_length; encode_with_offsets / encode_words (a split at spaces) must
// give the same ids with every span inside its text. Seeds: corpus/tokenizer.
//
// Each tokenizer kind is one entry of kTokenizerKinds: the files the first
// section becomes in a model folder, read by from_model_dir. Every input is
// tried as each kind: a vocab.txt (WordPiece), a tokenizer.json (byte-level
// BPE, WordPiece in HF's JSON form, or Unigram), a vocab.json + merges.txt
// (the first section split at "\n-----\n") and an spm.model. A kind added later is one more entry,
// its seeds more files under corpus/tokenizer.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "fuzz_support.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/data/tokenizer.h"

namespace {

// vocab.json + merges.txt share the first section, split at this line.
constexpr std::string_view kMergesSeparator = "\n-----\n";

struct TokenizerKind {
  const char* vocab_file;   // the file the first section (before kMergesSeparator) becomes
  const char* merges_file;  // the file the rest after kMergesSeparator becomes; nullptr: none
};

const TokenizerKind kTokenizerKinds[] = {
    {"vocab.txt", nullptr},
    {"tokenizer.json", nullptr},
    {"vocab.json", "merges.txt"},
    // A SentencePiece ModelProto: parsed and checked field by field
    // (src/data/tokenizer/spm_model.cpp), then refused (no module under the sanitizers).
    {"spm.model", nullptr},
};

// Writes the model folder's files from the sections; returns the folder.
std::string tokenizer_fuzz_folder(const TokenizerKind& kind, const std::string& vocab, const std::string& config) {
  fuzz_support::clear_scratch();
  if (kind.merges_file == nullptr) {
    fuzz_support::write_scratch(kind.vocab_file, vocab);
  } else {
    const size_t at = vocab.find(kMergesSeparator);
    fuzz_support::write_scratch(kind.vocab_file, vocab.substr(0, at));
    if (at != std::string::npos) fuzz_support::write_scratch(kind.merges_file, vocab.substr(at + kMergesSeparator.size()));
  }
  if (!config.empty()) fuzz_support::write_scratch("tokenizer_config.json", config);
  return fuzz_support::scratch().string();
}

void tokenizer_fuzz_check(const shardtrain::Tokenizer& tokenizer, const std::string& a, const std::string& b,
                          int max_length) {
  const int64_t vocab_size = tokenizer.vocab_size();
  std::vector<int32_t> ids;
  tokenizer.tokenize(a, ids);
  for (int32_t id : ids) {
    FUZZ_REQUIRE(id >= 0 && id < vocab_size);
    (void)tokenizer.token(id);
  }
  const std::optional<std::string_view> second = b.empty() ? std::nullopt : std::optional<std::string_view>(b);
  try {
    const shardtrain::Encoding encoding = tokenizer.encode(a, second, max_length);
    FUZZ_REQUIRE(encoding.input_ids.size() == encoding.token_type_ids.size());
    if (max_length > 0) FUZZ_REQUIRE(static_cast<int>(encoding.input_ids.size()) <= max_length);
    // WordPiece: [CLS] first; BPE: whatever its template puts first.
    if (std::string_view(tokenizer.type()) == "wordpiece")
      FUZZ_REQUIRE(!encoding.input_ids.empty() && encoding.input_ids.front() == tokenizer.cls_id());
    FUZZ_REQUIRE(encoding.input_ids.size() >= static_cast<size_t>(tokenizer.num_special_tokens(second.has_value())));
    for (int32_t id : encoding.input_ids) FUZZ_REQUIRE(id >= 0 && id < vocab_size);
    // Offsets: the same ids, every span inside its own text.
    const shardtrain::Encoding with_offsets = tokenizer.encode_with_offsets(a, second, max_length);
    FUZZ_REQUIRE(with_offsets.input_ids == encoding.input_ids);
    FUZZ_REQUIRE(with_offsets.offsets.size() == encoding.input_ids.size());
    FUZZ_REQUIRE(with_offsets.sequence_ids.size() == encoding.input_ids.size());
    for (size_t i = 0; i < with_offsets.offsets.size(); ++i) {
      const shardtrain::TokenSpan span = with_offsets.offsets[i];
      const int sequence = with_offsets.sequence_ids[i];
      const size_t size = sequence == 1 ? b.size() : a.size();
      FUZZ_REQUIRE(span.begin >= 0 && span.begin <= span.end && static_cast<size_t>(span.end) <= size);
    }
    // Pre-split words: a's space-separated words, each span inside its word.
    std::vector<std::string_view> words;
    for (size_t start = 0; start <= a.size();) {
      const size_t space = std::min(a.find(' ', start), a.size());
      words.push_back(std::string_view(a).substr(start, space - start));
      start = space + 1;
    }
    const shardtrain::Encoding split = tokenizer.encode_words(words, max_length, true);
    FUZZ_REQUIRE(split.word_ids.size() == split.input_ids.size() && split.offsets.size() == split.input_ids.size());
    for (size_t i = 0; i < split.input_ids.size(); ++i) {
      FUZZ_REQUIRE(split.input_ids[i] >= 0 && split.input_ids[i] < vocab_size);
      if (split.word_ids[i] < 0) continue;
      FUZZ_REQUIRE(static_cast<size_t>(split.word_ids[i]) < words.size());
      FUZZ_REQUIRE(static_cast<size_t>(split.offsets[i].end) <= words[static_cast<size_t>(split.word_ids[i])].size());
    }
    if (max_length > 0) FUZZ_REQUIRE(static_cast<int>(split.input_ids.size()) <= max_length);
  } catch (const shardtrain::Error&) {
    // max_length below the special tokens' count: refused, as documented.
    FUZZ_REQUIRE(max_length < tokenizer.num_special_tokens(second.has_value()));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  shardtrain::set_log_rank(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string> parts = fuzz_support::sections(data, size, 4);
  const int max_length = parts[2].empty() ? 0 : static_cast<unsigned char>(parts[2][0]) % 40;
  for (const TokenizerKind& kind : kTokenizerKinds) {
    std::optional<shardtrain::Tokenizer> tokenizer;
    try {
      tokenizer.emplace(shardtrain::Tokenizer::from_model_dir(tokenizer_fuzz_folder(kind, parts[0], parts[1])));
    } catch (const shardtrain::Error&) {
      continue;  // a vocabulary or config refused with a message
    }
    tokenizer_fuzz_check(*tokenizer, parts[2], parts[3], max_length);
  }
  return 0;
}
