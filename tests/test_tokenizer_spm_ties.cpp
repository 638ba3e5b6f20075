// SentencePiece Unigram ties: the ids are SentencePiece's on the whole text
// where two segmentations of a chunk tie and the text before it decides.
//
// tests/data/spm/ties-3500 is a Unigram model trained by spm_train on the
// SIB-200 training text (English, Chinese, Arabic) with pieces of at most two
// characters: it has "0" and "00" but not "000", so "000" is "0" "00" or "00"
// "0", whose scores are equal in exact arithmetic. SentencePiece's float
// Viterbi picks one by the rounding of its running score over the text before
// (src/data/tokenizer/spm_unigram.h), so "... $500,000." encoded whole and its chunk
// "$500,000." encoded alone differ. ties-3500_ids.jsonl holds
// python3-sentencepiece's ids on the whole texts (XLM-R layout), made by
// tests/fixtures/make_spm_fixtures.py, for MRPC dev, the edge cases and
// numbers after 0 to 44 repeats of a sentence, and marks the texts whose
// chunks encoded one by one give other ids ("chunks_differ").
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "shardtrain/data/tokenizer.h"
#include "support/scratch_dir.h"
#include "support/tokenizer_fixtures.h"

namespace {

using shardtrain::Encoding;
using shardtrain::Tokenizer;
using shardtrain::TokenSpan;

struct TieRow {
  std::string set;
  int idx = 0;
  std::string a;
  std::optional<std::string> b;
  std::vector<int32_t> ids;
  bool chunks_differ = false;
};

// The reference rows, MRPC's texts read from data/glue/MRPC/dev.tsv.
const std::vector<TieRow>& tie_rows() {
  static const std::vector<TieRow> rows = [] {
    const std::string source = shardtrain_test::source_dir();
    std::vector<std::vector<std::string>> mrpc;
    std::ifstream dev(source + "/data/glue/MRPC/dev.tsv", std::ios::binary);
    REQUIRE(dev);
    std::string line;
    std::getline(dev, line);  // header
    while (std::getline(dev, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      mrpc.push_back(shardtrain_test::split_tabs(line));
    }
    std::vector<TieRow> out;
    std::ifstream reference(source + "/tests/data/spm/ties-3500_ids.jsonl");
    REQUIRE(reference);
    while (std::getline(reference, line)) {
      const nlohmann::json row = nlohmann::json::parse(line);
      TieRow tie;
      tie.set = row["set"].get<std::string>();
      tie.idx = row["idx"].get<int>();
      tie.ids = row["input_ids"].get<std::vector<int32_t>>();
      tie.chunks_differ = row["chunks_differ"].get<bool>();
      if (tie.set == "mrpc_dev") {
        const auto& fields = mrpc.at(static_cast<std::size_t>(tie.idx));
        REQUIRE(fields.size() == 5);
        tie.a = fields[3];
        tie.b = fields[4];
      } else {
        tie.a = row["a"].get<std::string>();
      }
      out.push_back(std::move(tie));
    }
    return out;
  }();
  return rows;
}

const Tokenizer& ties_tokenizer() {
  static const Tokenizer tokenizer =
      Tokenizer::from_model_dir(shardtrain_test::source_dir() + "/tests/data/spm/ties-3500");
  return tokenizer;
}

Encoding tie_encode(const TieRow& row, bool offsets) {
  const auto b = row.b ? std::optional<std::string_view>(*row.b) : std::nullopt;
  return offsets ? ties_tokenizer().encode_with_offsets(row.a, b, 0) : ties_tokenizer().encode(row.a, b, 0);
}

// A text's chunks (cut at ASCII spaces) tokenized one by one.
std::vector<int32_t> tie_chunk_by_chunk(std::string_view text) {
  std::vector<int32_t> ids;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t space = std::min(text.find(' ', at), text.size());
    if (space > at) ties_tokenizer().tokenize(text.substr(at, space - at), ids);
    at = space + 1;
  }
  return ids;
}

}  // namespace

#if !defined(SHARDTRAIN_SANITIZED)  // SentencePiece needs its module (test_tokenizer_spm.cpp)
TEST_CASE("SentencePiece Unigram ties: SentencePiece's ids on the whole text, cold and cached") {
  const std::vector<TieRow>& rows = tie_rows();
  REQUIRE(rows.size() == 408 + 18 + 84);
  std::size_t differ = 0, mrpc_differ = 0;
  for (const TieRow& row : rows) {
    differ += row.chunks_differ ? 1 : 0;
    mrpc_differ += row.chunks_differ && row.set == "mrpc_dev" ? 1 : 0;
  }
  // The fixture holds ties: texts whose chunks alone give other ids.
  CHECK(mrpc_differ >= 10);
  CHECK(differ >= 50);
  // The first pass fills the per-thread chunk cache, the second reads it.
  for (const std::string pass : {"cold", "cached"}) {
    std::size_t mismatches = 0;
    for (const TieRow& row : rows) {
      const Encoding e = tie_encode(row, false);
      mismatches += e.input_ids != row.ids ? 1 : 0;
      CHECK_MESSAGE(e.input_ids == row.ids, pass, ": ", row.set, " ", row.idx, ": ", row.a);
    }
    CHECK_MESSAGE(mismatches == 0, pass);
  }
}

TEST_CASE("SentencePiece Unigram ties: a chunk alone ties the other way, and the whole text's offsets hold") {
  std::size_t checked = 0;
  for (const TieRow& row : tie_rows()) {
    if (!row.chunks_differ || row.b) continue;
    // shardtrain too: the chunks one by one are not the whole text.
    std::vector<int32_t> whole;
    ties_tokenizer().tokenize(row.a, whole);
    CHECK_MESSAGE(tie_chunk_by_chunk(row.a) != whole, row.a);
    // Offsets: the same ids; a piece without "▁" spans its own text.
    const Encoding e = tie_encode(row, true);
    REQUIRE(e.input_ids == row.ids);
    REQUIRE(e.offsets.size() == e.input_ids.size());
    int32_t previous_end = 0;
    for (std::size_t i = 0; i < e.offsets.size(); ++i) {
      if (e.sequence_ids[i] < 0) continue;
      const TokenSpan span = e.offsets[i];
      REQUIRE(span.begin <= span.end);
      REQUIRE(span.end <= static_cast<int32_t>(row.a.size()));
      CHECK(span.begin >= previous_end);
      previous_end = span.end;
      const std::string piece = ties_tokenizer().token(e.input_ids[i]);
      if (piece.rfind("\xE2\x96\x81", 0) != 0)
        CHECK_MESSAGE(row.a.substr(static_cast<std::size_t>(span.begin), static_cast<std::size_t>(span.end - span.begin)) ==
                          piece,
                      row.a, " token ", i);
    }
    ++checked;
  }
  CHECK(checked >= 40);
}

TEST_CASE("SentencePiece: without a U+2581 piece or byte fallback, unknown text merges across spaces") {
  // SentencePiece merges a run of unknown pieces into one, across an unknown
  // "▁" too: "x a" is "▁x▁" "a" (python3-sentencepiece, this vocabulary as a
  // ModelProto), not "▁x" then "▁" "a" as its chunks alone would be.
  const std::string tokenizer_json = R"({
    "model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0], ["a", -1.0], ["b", -2.0], ["ab", -1.5], ["<pad>", 0.0]]},
    "normalizer": {"type": "Strip", "left": true, "right": true},
    "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always"},
    "added_tokens": [{"id": 4, "content": "<pad>", "special": true}]})";
  shardtrain_test::ScratchDir folder("spm_ties_no_meta");
  std::ofstream(folder.dir + "/tokenizer.json") << tokenizer_json;
  const Tokenizer tokenizer = Tokenizer::from_model_dir(folder.dir);
  std::vector<int32_t> ids;
  tokenizer.tokenize("x a", ids);
  CHECK(ids == std::vector<int32_t>{0, 1});
  ids.clear();
  tokenizer.tokenize("xy ab b", ids);
  CHECK(ids == std::vector<int32_t>{0, 3, 0, 2});
}
#endif
