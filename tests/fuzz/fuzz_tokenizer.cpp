// libFuzzer target: the tokenizers on hostile vocabularies, configs and
// arbitrary bytes. Input sections (separated by "\n=====\n"): a vocabulary
// file, its tokenizer_config.json, text a, text b. The first byte of text a
// picks max_length. Every id must lie in the vocabulary and encode() must keep
// to max_length. Seeds: corpus/tokenizer.
//
// Each tokenizer kind is one entry of kTokenizerKinds (how to build one from a
// model folder); a kind added later (a byte-level BPE reading tokenizer.json)
// is one more entry, its seeds more files under corpus/tokenizer.
#include <cstdint>
#include <optional>
#include <string>

#include "fuzz_support.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/data/tokenizer.h"

namespace {

// Writes the model folder's files from the sections; returns the folder.
std::string tokenizer_fuzz_folder(const std::string& vocab_name, const std::string& vocab, const std::string& config) {
  fuzz_support::clear_scratch();
  fuzz_support::write_scratch(vocab_name, vocab);
  if (!config.empty()) fuzz_support::write_scratch("tokenizer_config.json", config);
  return fuzz_support::scratch().string();
}

struct TokenizerKind {
  const char* vocab_file;  // the file the first section becomes
  shardtrain::Tokenizer (*from_folder)(const std::string& dir);
};

const TokenizerKind kTokenizerKinds[] = {
    {"vocab.txt", [](const std::string& dir) { return shardtrain::Tokenizer::from_model_dir(dir); }},
};

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
    FUZZ_REQUIRE(!encoding.input_ids.empty() && encoding.input_ids.front() == tokenizer.cls_id());
    for (int32_t id : encoding.input_ids) FUZZ_REQUIRE(id >= 0 && id < vocab_size);
  } catch (const shardtrain::Error&) {
    // max_length below the special tokens' count: refused, as documented.
    FUZZ_REQUIRE(max_length < (second ? 3 : 2));
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
      tokenizer.emplace(kind.from_folder(tokenizer_fuzz_folder(kind.vocab_file, parts[0], parts[1])));
    } catch (const shardtrain::Error&) {
      continue;  // a vocabulary or config refused with a message
    }
    tokenizer_fuzz_check(*tokenizer, parts[2], parts[3], max_length);
  }
  return 0;
}
