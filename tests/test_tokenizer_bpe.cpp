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

#include <array>
#include <fstream>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shardtrain/core/check.h"
#include "shardtrain/data/tokenizer.h"
#include "support/scratch_dir.h"
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

namespace {

// tests/data/llama3_bpe/make_llama3_bpe.js's tokenizer.json: roberta-base's
// vocabulary and merges under Llama-3's structure (Split with Llama-3's regex,
// ByteLevel without its own, ignore_merges, <|begin_of_text|> and
// <|end_of_text|> added, a TemplateProcessing post-processor). The same edits
// as the script's, so the file need not be shipped twice.
std::string llama3_tokenizer_json() {
  std::ifstream in(kBpeSourceDir + "/data/vocab/roberta-base/tokenizer.json", std::ios::binary);
  nlohmann::ordered_json t = nlohmann::ordered_json::parse(in);
  const int n = static_cast<int>(t["model"]["vocab"].size());
  auto special = [](const char* content, int id) {
    return nlohmann::ordered_json{{"id", id},          {"content", content}, {"single_word", false},
                                  {"lstrip", false},   {"rstrip", false},    {"normalized", false},
                                  {"special", true}};
  };
  t["added_tokens"].push_back(special("<|begin_of_text|>", n));
  t["added_tokens"].push_back(special("<|end_of_text|>", n + 1));
  t["normalizer"] = nullptr;
  const std::string pattern =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
      "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  t["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
  t["model"]["ignore_merges"] = true;
  auto token = [](const char* id) { return nlohmann::ordered_json{{"SpecialToken", {{"id", id}, {"type_id", 0}}}}; };
  auto sequence = [](const char* id) { return nlohmann::ordered_json{{"Sequence", {{"id", id}, {"type_id", 0}}}}; };
  nlohmann::ordered_json specials;
  specials["<|begin_of_text|>"] = {{"id", "<|begin_of_text|>"}, {"ids", {n}}, {"tokens", {"<|begin_of_text|>"}}};
  specials["<|end_of_text|>"] = {{"id", "<|end_of_text|>"}, {"ids", {n + 1}}, {"tokens", {"<|end_of_text|>"}}};
  t["post_processor"] = {
      {"type", "Sequence"},
      {"processors",
       {{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}},
        {{"type", "TemplateProcessing"},
         {"single", {token("<|begin_of_text|>"), sequence("A"), token("<|end_of_text|>")}},
         {"pair",
          {token("<|begin_of_text|>"), sequence("A"), token("<|end_of_text|>"), sequence("B"),
           token("<|end_of_text|>")}},
         {"special_tokens", specials}}}}};
  return t.dump();
}

}  // namespace

TEST_CASE("Llama-3-style byte-level BPE (EuroBERT's structure): ids and offsets equal HF's on MRPC, SIB-200 and edge "
          "cases") {
  const shardtrain_test::ScratchDir dir("llama3_bpe");
  {
    std::ofstream out(dir.dir + "/tokenizer.json", std::ios::binary);
    out << llama3_tokenizer_json();
  }
  const Tokenizer tokenizer = Tokenizer::from_model_dir(dir.dir);
  std::ifstream reference(kBpeSourceDir + "/tests/data/llama3_bpe/ids.jsonl");
  REQUIRE(reference);
  std::size_t lines = 0, mismatches = 0, offset_mismatches = 0;
  // A shipped file's rows (after its header), split at tabs.
  std::map<std::string, std::vector<std::vector<std::string>>> files;
  auto rows_of = [&](const std::string& file) -> const std::vector<std::vector<std::string>>& {
    auto& rows = files[file];
    if (rows.empty()) {
      std::ifstream in(kBpeSourceDir + "/" + file, std::ios::binary);
      std::string text;
      std::getline(in, text);  // header
      while (std::getline(in, text)) {
        if (!text.empty() && text.back() == '\r') text.pop_back();
        rows.push_back(shardtrain_test::split_tabs(text));
      }
    }
    return rows;
  };
  for (std::string line; std::getline(reference, line);) {
    const nlohmann::json row = nlohmann::json::parse(line);
    std::string a;
    std::optional<std::string> b;
    if (row.contains("file")) {
      const auto& fields = rows_of(row["file"].get<std::string>()).at(row["row"].get<std::size_t>());
      a = fields.at(row["a"].get<std::size_t>());
      if (row.contains("b")) b = fields.at(row["b"].get<std::size_t>());
    } else {
      a = row["a"].get<std::string>();
      if (!row["b"].is_null()) b = row["b"].get<std::string>();
    }
    const std::optional<std::string_view> b_view = b ? std::optional<std::string_view>(*b) : std::nullopt;
    const Encoding encoding = tokenizer.encode(a, b_view, 0);
    const auto expected = row["ids"].get<BpeIds>();
    if (encoding.input_ids != expected) ++mismatches;
    CHECK_MESSAGE(encoding.input_ids == expected, "line ", lines, ": ", a);
    // HF's offsets count characters; ours are bytes of the same characters.
    const Encoding with_offsets = tokenizer.encode_with_offsets(a, b_view, 0);
    CHECK(with_offsets.input_ids == encoding.input_ids);
    std::vector<std::array<int64_t, 2>> offsets;
    for (std::size_t i = 0; i < with_offsets.offsets.size(); ++i) {
      const std::string& text = with_offsets.sequence_ids[i] == 1 ? *b : a;
      auto characters = [&](int32_t byte) {  // characters before byte `byte` of `text`
        int64_t count = 0;
        for (int32_t k = 0; k < byte; ++k) count += (static_cast<unsigned char>(text[k]) & 0xC0) != 0x80;
        return count;
      };
      offsets.push_back({characters(with_offsets.offsets[i].begin), characters(with_offsets.offsets[i].end)});
    }
    using Offsets = std::vector<std::array<int64_t, 2>>;
    const Offsets expected_offsets = row["offsets"].get<Offsets>();
    const bool same_offsets = offsets == expected_offsets;
    if (!same_offsets) ++offset_mismatches;
    CHECK_MESSAGE(same_offsets, "offsets, line ", lines, ": ", a);
    ++lines;
  }
  CHECK(lines == 253);
  CHECK(mismatches == 0);
  CHECK(offset_mismatches == 0);
}

TEST_CASE("a Split pre-tokenizer other than Llama-3's is refused, naming it") {
  const shardtrain_test::ScratchDir dir("llama3_bpe_bad");
  std::string text = llama3_tokenizer_json();
  const std::string isolated = "\"behavior\":\"Isolated\"";
  text.replace(text.find(isolated), isolated.size(), "\"behavior\":\"Removed\"");
  {
    std::ofstream out(dir.dir + "/tokenizer.json", std::ios::binary);
    out << text;
  }
  CHECK_THROWS_WITH_AS(Tokenizer::from_model_dir(dir.dir),
                       doctest::Contains("a Split pre_tokenizer is read only with Llama-3's regex"), shardtrain::Error);
}
