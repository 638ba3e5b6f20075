// Byte-level BPE tokenizers (roberta-base, ModernBERT): exact ids against
// Hugging Face's Rust tokenizers.
//
// 1. All 408 MRPC dev pairs against tests/data/mrpc_dev_{roberta-base,
//    modernbert}_ids.jsonl (HF's ids for the files in data/vocab/).
// 2. Hand-derived cases: each expected id is the id vocab.json /
//    tokenizer.json give the token in the comment (Ġ = a leading space in
//    the GPT-2 byte alphabet), following the GPT-2 pre-tokenizer regex.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shardtrain/core/check.h"
#include "shardtrain/data/tokenizer.h"
#include "support/tokenizer_fixtures.h"

namespace {

using shardtrain::Encoding;
using shardtrain::Tokenizer;
using BpeIds = std::vector<int32_t>;

const std::string kBpeSourceDir = SHARDTRAIN_SOURCE_DIR;

const Tokenizer& roberta() { return shardtrain_test::roberta_base(); }
const Tokenizer& modernbert() { return shardtrain_test::modernbert_tokenizer(); }

// Every MRPC dev pair through `tokenizer`, against the reference file.
void bpe_check_mrpc_reference(const Tokenizer& tokenizer, const std::string& reference_file) {
  std::ifstream tsv(kBpeSourceDir + "/data/glue/MRPC/dev.tsv", std::ios::binary);
  std::ifstream reference(kBpeSourceDir + "/tests/data/" + reference_file);
  REQUIRE(tsv);
  REQUIRE(reference);
  std::string line, json_line;
  std::getline(tsv, line);  // header
  std::size_t row = 0, mismatches = 0;
  while (std::getline(tsv, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const std::vector<std::string> fields = shardtrain_test::split_tabs(line);
    REQUIRE(fields.size() == 5);
    REQUIRE_MESSAGE(std::getline(reference, json_line), "reference ends before row ", row);
    const nlohmann::json expected = nlohmann::json::parse(json_line);
    REQUIRE(expected["idx"].get<std::size_t>() == row);
    const Encoding encoding = tokenizer.encode(fields[3], std::string_view(fields[4]), 0);
    const auto expected_ids = expected["input_ids"].get<BpeIds>();
    const auto expected_types = expected["token_type_ids"].get<std::vector<int>>();
    const std::vector<int> types(encoding.token_type_ids.begin(), encoding.token_type_ids.end());
    if (encoding.input_ids != expected_ids) ++mismatches;
    CHECK_MESSAGE(encoding.input_ids == expected_ids, "row ", row, ": ", fields[3], " ||| ", fields[4]);
    CHECK_MESSAGE(types == expected_types, "row ", row);
    ++row;
  }
  CHECK(row == 408);
  CHECK(mismatches == 0);
  CHECK(!std::getline(reference, json_line));
}

BpeIds bpe_tokens_of(const Tokenizer& tokenizer, std::string_view text) {
  BpeIds ids;
  tokenizer.tokenize(text, ids);
  return ids;
}

}  // namespace

TEST_CASE("MRPC dev: all 408 pairs match HF's roberta-base tokenizer (tokenizer.json) exactly") {
  bpe_check_mrpc_reference(roberta(), "mrpc_dev_roberta-base_ids.jsonl");
  CHECK(std::string(roberta().type()) == "bpe");
}

TEST_CASE("MRPC dev: all 408 pairs match HF's ModernBERT tokenizer exactly") {
  bpe_check_mrpc_reference(modernbert(), "mrpc_dev_modernbert_ids.jsonl");
}
