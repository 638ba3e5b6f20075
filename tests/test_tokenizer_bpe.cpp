// BPE tokenizers: exact ids against Hugging Face's Rust tokenizers.
//
// 1. All 408 MRPC dev pairs against tests/data/mrpc_dev_{roberta-base,
//    modernbert}_ids.jsonl (HF's ids for the files in data/vocab/).
// 2. Llama-3's byte-level structure (EuroBERT) and Gemma's SentencePiece-style
//    structure (mmBERT; byte fallback, fuse_unk, the "▁" normalizer,
//    Metaspace): ids and offsets against tests/data/{llama3,gemma}_bpe/ids.jsonl,
//    made by the make_*.js scripts there with HF's Rust tokenizers.
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

namespace {

// A tokenizer.json text in a scratch folder, loaded.
Tokenizer bpe_from_json_text(const std::string& text, const char* scratch_name) {
  const shardtrain_test::ScratchDir dir(scratch_name);
  {
    std::ofstream out(dir.dir + "/tokenizer.json", std::ios::binary);
    out << text;
  }
  return Tokenizer::from_model_dir(dir.dir);
}

// The lines of a make_*.js reference file (tests/data/<reference>) whose
// "variant" is `variant` (every line when empty) through `tokenizer`: ids and
// offsets equal HF's. Returns the number of lines compared.
std::size_t bpe_check_reference(const Tokenizer& tokenizer, const std::string& reference_file,
                                const std::string& variant = "") {
  std::ifstream reference(kBpeSourceDir + "/tests/data/" + reference_file);
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
    if (!variant.empty() && row.value("variant", "") != variant) continue;
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
    CHECK_MESSAGE(encoding.input_ids == expected, variant, " line ", lines, ": ", a);
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
    CHECK_MESSAGE(same_offsets, variant, " offsets, line ", lines, ": ", a);
    ++lines;
  }
  CHECK(mismatches == 0);
  CHECK(offset_mismatches == 0);
  return lines;
}

}  // namespace

TEST_CASE("Llama-3-style byte-level BPE (EuroBERT's structure): ids and offsets equal HF's on MRPC, SIB-200 and edge "
          "cases") {
  const Tokenizer tokenizer = bpe_from_json_text(llama3_tokenizer_json(), "llama3_bpe");
  CHECK(bpe_check_reference(tokenizer, "llama3_bpe/ids.jsonl") == 253);
}

TEST_CASE("a Split pre-tokenizer other than Llama-3's is refused, naming it") {
  std::string text = llama3_tokenizer_json();
  const std::string isolated = "\"behavior\":\"Isolated\"";
  text.replace(text.find(isolated), isolated.size(), "\"behavior\":\"Removed\"");
  CHECK_THROWS_WITH_AS(bpe_from_json_text(text, "llama3_bpe_bad"),
                       doctest::Contains("a Split pre_tokenizer is read only with Llama-3's regex"), shardtrain::Error);
}

namespace {

using ordered_json = nlohmann::ordered_json;
const char* const kMeta = "\xE2\x96\x81";  // "▁"

// tests/data/gemma_bpe/tokenizer.json (mmBERT's structure) with the edit of
// make_gemma_bpe.js's `variants[variant]`.
ordered_json gemma_variant(const std::string& variant) {
  std::ifstream in(kBpeSourceDir + "/tests/data/gemma_bpe/tokenizer.json", std::ios::binary);
  ordered_json t = ordered_json::parse(in);
  auto sequence = [](const char* id, int type_id) { return ordered_json{{"Sequence", {{"id", id}, {"type_id", type_id}}}}; };
  if (variant == "gemma") {  // <bos> A, <bos> A <bos>:1 B:1
    const ordered_json bos = t["post_processor"]["single"][0];
    t["post_processor"]["single"] = ordered_json::array({bos, sequence("A", 0)});
    t["post_processor"]["pair"] = ordered_json::array(
        {bos, sequence("A", 0), ordered_json{{"SpecialToken", {{"id", "<bos>"}, {"type_id", 1}}}}, sequence("B", 1)});
    t["post_processor"]["special_tokens"].erase("<eos>");
  } else if (variant == "llama2") {
    t["normalizer"] = {{"type", "Sequence"},
                       {"normalizers", {{{"type", "Prepend"}, {"prepend", kMeta}}, t["normalizer"]}}};
    t["decoder"]["decoders"].push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  } else if (variant == "metaspace_first" || variant == "metaspace_split") {
    const bool first = variant == "metaspace_first";
    t["normalizer"] = nullptr;
    t["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", kMeta},
                          {"prepend_scheme", first ? "first" : "always"}, {"split", !first}};
  } else if (variant == "ignore_merges") {
    t["model"]["ignore_merges"] = true;
  } else if (variant == "unk_fused" || variant == "unk_unfused") {
    t["model"]["byte_fallback"] = false;
    t["model"]["fuse_unk"] = variant == "unk_fused";
  } else if (variant == "bytes_missing") {  // no <0xF0>..<0xF7>: 4-byte characters are unk
    for (const char* hex : {"F0", "F1", "F2", "F3", "F4", "F5", "F6", "F7"})
      t["model"]["vocab"].erase(std::string("<0x") + hex + ">");
  } else {
    REQUIRE(variant == "mmbert");
  }
  return t;
}

Tokenizer gemma_tokenizer(const std::string& variant) { return bpe_from_json_text(gemma_variant(variant).dump(), "gemma_bpe"); }

std::vector<std::string> token_strings(const Tokenizer& tokenizer, std::string_view text) {
  std::vector<std::string> out;
  for (const int32_t id : bpe_tokens_of(tokenizer, text)) out.push_back(tokenizer.token(id));
  return out;
}

}  // namespace

TEST_CASE("Gemma-style BPE (mmBERT's tokenizer.json): ids and offsets equal HF's on MRPC, SIB-200 and edge cases") {
  const Tokenizer tokenizer = gemma_tokenizer("mmbert");
  CHECK(std::string(tokenizer.type()) == "bpe");
  CHECK(bpe_check_reference(tokenizer, "gemma_bpe/ids.jsonl", "mmbert") == 265);
  // What the reference exercises, spelled out: the "▁" of the Replace
  // normalizer, byte fallback for
  // an emoji (no such character there), one unk per run only without byte
  // fallback (fuse_unk).
  CHECK(token_strings(tokenizer, "Hello world") == std::vector<std::string>{"H", "ell", "o", std::string(kMeta) + "world"});
  CHECK(token_strings(tokenizer, "\xF0\x9F\x98\x80") == std::vector<std::string>{"<0xF0>", "<0x9F>", "<0x98>", "<0x80>"});
  CHECK(token_strings(gemma_tokenizer("unk_fused"), "\xF0\x9F\x98\x80\xF0\x9F\x98\x80") ==
        std::vector<std::string>{"<unk>"});
  CHECK(token_strings(gemma_tokenizer("unk_unfused"), "\xF0\x9F\x98\x80\xF0\x9F\x98\x80") ==
        std::vector<std::string>{"<unk>", "<unk>"});
  CHECK(tokenizer.cls_id() == 2);  // <bos>
  CHECK(tokenizer.sep_id() == 1);  // <eos>
  CHECK(tokenizer.pad_id() == 0);
  CHECK(tokenizer.mask_id() == 4);
}

TEST_CASE("Gemma-style BPE variants: Gemma's template, Llama-2's Prepend, Metaspace first / split, ignore_merges, unk "
          "with and without fusing, missing byte tokens: ids and offsets equal HF's") {
  for (const char* variant : {"gemma", "llama2", "metaspace_first", "metaspace_split", "ignore_merges", "unk_fused",
                              "unk_unfused", "bytes_missing"}) {
    CAPTURE(variant);
    CHECK(bpe_check_reference(gemma_tokenizer(variant), "gemma_bpe/ids.jsonl", variant) == 65);
  }
  // HF adds an unknown character's byte-fallback tokens before an unk that
  // waits to be fused (here the emoji's: no <0xF0>), and counts offsets from
  // the symbols' lengths in that order: the reference has both.
  CHECK(token_strings(gemma_tokenizer("bytes_missing"), "\xF0\x9F\x98\x80\xCA\xAC") ==
        std::vector<std::string>{"<0xCA>", "<0xAC>", "<unk>"});
}

TEST_CASE("Gemma-style BPE: what is not implemented is refused by name") {
  std::ifstream in(kBpeSourceDir + "/data/vocab/roberta-base/tokenizer.json", std::ios::binary);
  const ordered_json roberta_json = ordered_json::parse(in);
  struct Case {
    ordered_json file;     // the file changed
    const char* pointer;   // where (a JSON pointer)
    ordered_json value;    // to what
    const char* needle;    // the error names it
  };
  const std::vector<Case> cases = {
      {gemma_variant("mmbert"), "/normalizer/pattern", {{"Regex", " +"}},
       "normalizer Replace pattern {\"Regex\":\" +\"} is not supported with a BPE model"},
      {gemma_variant("mmbert"), "/normalizer", {{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}},
       "normalizer type 'Strip' is not supported with a BPE model"},
      {gemma_variant("metaspace_split"), "/pre_tokenizer/replacement", "__",
       "pre_tokenizer Metaspace replacement must be one character"},
      {gemma_variant("metaspace_split"), "/pre_tokenizer/prepend_scheme", "sometimes",
       "Metaspace prepend_scheme must be \"always\", \"first\" or \"never\""},
      {gemma_variant("mmbert"), "/pre_tokenizer", {{"type", "Whitespace"}},
       "pre_tokenizer 'Whitespace' is not supported with a BPE model"},
      {gemma_variant("mmbert"), "/model/dropout", 0.1, "model.dropout > 0 (BPE dropout) is not supported"},
      {gemma_variant("mmbert"), "/model/continuing_subword_prefix", "##",
       "model.continuing_subword_prefix (non-empty) is not supported"},
      {gemma_variant("mmbert"), "/model/end_of_word_suffix", "</w>",
       "model.end_of_word_suffix (non-empty) is not supported"},
      // Byte fallback and unk fusing belong to the other kind of BPE.
      {roberta_json, "/model/byte_fallback", true,
       "model.byte_fallback = true with the ByteLevel pre_tokenizer is not supported"},
      {roberta_json, "/model/fuse_unk", true, "model.fuse_unk = true with the ByteLevel pre_tokenizer is not supported"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.pointer);
    ordered_json t = c.file;
    t[ordered_json::json_pointer(c.pointer)] = c.value;
    CHECK_THROWS_WITH_AS(bpe_from_json_text(t.dump(), "gemma_bpe_bad"), doctest::Contains(c.needle), shardtrain::Error);
  }
  // transformers' Gemma and Llama classes rebuild the template; add_prefix_space re-converts.
  const std::vector<std::array<std::string, 2>> configs = {
      {R"({"tokenizer_class": "GemmaTokenizerFast"})", "tokenizer_class 'GemmaTokenizerFast' is not supported"},
      {R"({"add_prefix_space": true})", "add_prefix_space is not supported with a SentencePiece-style BPE"}};
  for (const auto& [config, needle] : configs) {
    const shardtrain_test::ScratchDir dir("gemma_bpe_config");
    std::ofstream(dir.dir + "/tokenizer.json", std::ios::binary) << gemma_variant("mmbert").dump();
    std::ofstream(dir.dir + "/tokenizer_config.json", std::ios::binary) << config;
    CHECK_THROWS_WITH_AS(Tokenizer::from_model_dir(dir.dir), doctest::Contains(needle.c_str()), shardtrain::Error);
  }
}

TEST_CASE("Gemma-style BPE: mmBERT's own tokenizer_config.json (tests/fixtures/mmbert) is read, and leaves the ids "
          "HF's") {
  // PreTrainedTokenizerFast (the tokenizer.json's template as it is: transformers
  // applies add_bos_token only in its Llama / Gemma classes), Gemma's special
  // ids, 249 added tokens of the real 256k vocabulary.
  const shardtrain_test::ScratchDir dir("mmbert_tokenizer_config");
  std::ofstream(dir.dir + "/tokenizer.json", std::ios::binary) << gemma_variant("mmbert").dump();
  {
    std::ifstream config(kBpeSourceDir + "/tests/fixtures/mmbert/tokenizer_config.json", std::ios::binary);
    REQUIRE(config.good());
    std::ofstream(dir.dir + "/tokenizer_config.json", std::ios::binary) << config.rdbuf();
  }
  const Tokenizer tokenizer = Tokenizer::from_model_dir(dir.dir);
  CHECK(bpe_check_reference(tokenizer, "gemma_bpe/ids.jsonl", "mmbert") == 265);
  CHECK(tokenizer.cls_id() == 2);  // <bos>
  CHECK(tokenizer.sep_id() == 1);  // <eos>
  CHECK(tokenizer.pad_id() == 0);
  CHECK(tokenizer.mask_id() == 4);
}
