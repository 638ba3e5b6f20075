// SentencePiece tokenizers (DeBERTa-v2/v3, XLM-R, CamemBERT; spm.model,
// sentencepiece.bpe.model, tokenizer.json Unigram) against SentencePiece's
// own ids.
//
// The reference ids (tests/data/spm/*_ids.jsonl) come from Debian's
// python3-sentencepiece, the slow tokenizer's library, run offline by
// tests/fixtures/make_spm_fixtures.py, put in HF's layout as transformers'
// slow tokenizers do (DeBERTa: as they are; XLM-R: one id up, unknown -> 3)
// with their templates. They cover MRPC dev (pairs), SIB-200 dev + test in
// English, Chinese and Arabic, and edge cases (whitespace runs, NFKC-changed
// characters, unknown characters, byte fallback, emoji, empty text). The
// offsets are checked by hand-derived HF spans (HF's Metaspace alignment, see
// docs/tokenizers.md) and a property on every reference text.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "shardtrain/core/check.h"
#include "shardtrain/data/tokenizer.h"
#include "support/scratch_dir.h"
#include "support/tokenizer_fixtures.h"

namespace {

using shardtrain::Encoding;
using shardtrain::Tokenizer;
using shardtrain::TokenSpan;
using SpmIds = std::vector<int32_t>;

std::string spm_path(const std::string& relative) { return shardtrain_test::source_dir() + "/" + relative; }

const Tokenizer& spm_deberta() {
  static const Tokenizer tokenizer = Tokenizer::from_model_dir(spm_path("data/vocab/deberta-v3"));
  return tokenizer;
}
const Tokenizer& spm_xlmr() {
  static const Tokenizer tokenizer = Tokenizer::from_model_dir(spm_path("data/vocab/sib200-xlmr-8k"));
  return tokenizer;
}

// A scratch folder with the given files.
struct SpmFolder {
  shardtrain_test::ScratchDir scratch{"test_spm"};
  std::string write(const std::string& name, const std::string& content) const {
    const std::string path = scratch.dir + "/" + name;
    std::ofstream(path, std::ios::binary) << content;
    return path;
  }
};

std::string spm_read(const std::string& relative) {
  const std::string text = shardtrain_test::read_whole_file(spm_path(relative));
  REQUIRE(!text.empty());
  return text;
}

SpmIds spm_tokens(const Tokenizer& tokenizer, std::string_view text) {
  SpmIds ids;
  tokenizer.tokenize(text, ids);
  return ids;
}

struct SpmText {
  std::string set;
  std::string a;
  std::optional<std::string> b;
};

// Every reference text, keyed as the fixture script writes them.
std::map<std::pair<std::string, int>, SpmText> spm_reference_texts() {
  std::map<std::pair<std::string, int>, SpmText> texts;
  auto read_rows = [](const std::string& path) {
    std::ifstream file(path, std::ios::binary);
    REQUIRE(file);
    std::vector<std::vector<std::string>> rows;
    std::string line;
    std::getline(file, line);  // header
    while (std::getline(file, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      rows.push_back(shardtrain_test::split_tabs(line));
    }
    return rows;
  };
  const auto mrpc = read_rows(spm_path("data/glue/MRPC/dev.tsv"));
  for (std::size_t i = 0; i < mrpc.size(); ++i)
    if (mrpc[i].size() == 5) texts[{"mrpc_dev", static_cast<int>(i)}] = {"mrpc_dev", mrpc[i][3], mrpc[i][4]};
  for (const char* language : {"eng_Latn", "zho_Hans", "arb_Arab"}) {
    for (const char* split : {"dev", "test"}) {
      const std::string set = std::string("sib200_") + language + "_" + split;
      const auto rows = read_rows(spm_path(std::string("data/sib200/") + language + "/" + split + ".tsv"));
      for (std::size_t i = 0; i < rows.size(); ++i) texts[{set, static_cast<int>(i)}] = {set, rows[i][2], std::nullopt};
    }
  }
  // The edge cases of make_spm_fixtures.py, in its order.
  const std::vector<std::string> edge = {
      "", " ", "   ", "a", "Hello world", "  Hello   world  ", "tab\tand\nnewline\r\nend",
      "\xE3\x80\x80ideographic\xE3\x80\x80space", "non\xC2\xA0" "breaking",
      "\xEF\xBC\xA1\xEF\xBC\xA2\xEF\xBC\xA3 \xEF\xBC\x91\xEF\xBC\x92\xEF\xBC\x93",
      "\xEF\xAC\x81ne \xE2\x91\xA0 \xC2\xBD \xE2\x84\xA2", "cafe\xCC\x81 caf\xC3\xA9",
      "\xF0\x9F\x98\x80 \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD", "\xE0\xBC\x80\xE1\x9A\xA0\xE2\xB2\x80 \xF0\x90\x8D\x88",
      "zero\xE2\x80\x8Bwidth soft\xC2\xADhyphen",
      "\xD8\xA7\xD9\x84\xD8\xB9\xD9\x8E\xD8\xB1\xD9\x8E\xD8\xA8\xD9\x90\xD9\x8A\xD9\x8E\xD9\x91\xD8\xA9",
      "\xE4\xB8\xAD\xE6\x96\x87\xE6\xB5\x8B\xE8\xAF\x95\xEF\xBC\x8C\xE6\xA0\x87\xE7\x82\xB9\xE3\x80\x82",
      "Mixed \xE4\xB8\xAD\xE6\x96\x87 and \xD8\xB9\xD8\xB1\xD8\xA8\xD9\x8A"};
  for (std::size_t i = 0; i < edge.size(); ++i) texts[{"edge", static_cast<int>(i)}] = {"edge", edge[i], std::nullopt};
  return texts;
}

const std::map<std::pair<std::string, int>, SpmText>& spm_texts() {
  static const auto texts = spm_reference_texts();
  return texts;
}

// Token types of the template around the reference ids: DeBERTa's B part
// (from the first [SEP] on, exclusive) is 1, XLM-R's all 0.
std::vector<uint8_t> spm_types(const Tokenizer& tokenizer, const SpmIds& ids, bool pair) {
  std::vector<uint8_t> types(ids.size(), 0);
  if (!pair || tokenizer.max_token_type(true) == 0) return types;
  bool second = false;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    types[i] = second ? 1 : 0;
    if (ids[i] == tokenizer.sep_id()) second = true;
  }
  return types;
}

// Spans move forward inside their text; ids equal encode()'s.
void spm_check_offsets(const Tokenizer& tokenizer, const SpmText& text, const Encoding& plain, const std::string& where) {
  const Encoding e = tokenizer.encode_with_offsets(text.a, text.b ? std::optional<std::string_view>(*text.b) : std::nullopt, 0);
  REQUIRE_MESSAGE(e.input_ids == plain.input_ids, where);
  REQUIRE(e.offsets.size() == e.input_ids.size());
  int32_t previous[2] = {0, 0};
  for (std::size_t i = 0; i < e.offsets.size(); ++i) {
    const int sequence = e.sequence_ids[i];
    const TokenSpan span = e.offsets[i];
    if (sequence < 0) {
      CHECK(span == TokenSpan{});
      continue;
    }
    const std::string& own = sequence == 0 ? text.a : *text.b;
    CHECK_MESSAGE((span.begin <= span.end && span.end <= static_cast<int32_t>(own.size())), where, " token ", i);
    CHECK_MESSAGE(span.begin >= previous[sequence] - 4, where, " token ", i);  // byte pieces of one character share it
    previous[sequence] = std::max(previous[sequence], span.begin);
  }
}

// Every reference line of `file` through `tokenizer`.
std::size_t spm_check_reference(const Tokenizer& tokenizer, const std::string& file) {
  std::ifstream reference(spm_path("tests/data/spm/" + file));
  REQUIRE(reference);
  std::string line;
  std::size_t rows = 0, mismatches = 0;
  std::map<std::string, std::size_t> per_set;
  while (std::getline(reference, line)) {
    const nlohmann::json expected = nlohmann::json::parse(line);
    const std::string set = expected["set"].get<std::string>();
    const int idx = expected["idx"].get<int>();
    const auto it = spm_texts().find({set, idx});
    REQUIRE_MESSAGE(it != spm_texts().end(), set, " ", idx);
    const SpmText& text = it->second;
    const SpmIds ids = expected["input_ids"].get<SpmIds>();
    const Encoding e =
        tokenizer.encode(text.a, text.b ? std::optional<std::string_view>(*text.b) : std::nullopt, 0);
    if (e.input_ids != ids) ++mismatches;
    CHECK_MESSAGE(e.input_ids == ids, file, ": ", set, " ", idx, ": ", text.a);
    CHECK(e.token_type_ids == spm_types(tokenizer, ids, text.b.has_value()));
    if (idx % 4 == 0 || set == "edge") spm_check_offsets(tokenizer, text, e, set + " " + std::to_string(idx));
    ++rows;
    ++per_set[set];
  }
  CHECK(mismatches == 0);
  if (file != "bpe-1k_ids.jsonl") {
    CHECK(per_set["mrpc_dev"] == 408);
    for (const char* language : {"eng_Latn", "zho_Hans", "arb_Arab"})
      CHECK(per_set[std::string("sib200_") + language + "_test"] == 204);
  }
  CHECK(per_set["edge"] == 18);
  return rows;
}

std::vector<TokenSpan> spm_spans(std::initializer_list<std::pair<int, int>> list) {
  std::vector<TokenSpan> spans;
  for (const auto& [begin, end] : list) spans.push_back(TokenSpan{begin, end});
  return spans;
}

std::vector<TokenSpan> spm_offsets_of(const Tokenizer& tokenizer, std::string_view text) {
  SpmIds ids;
  std::vector<TokenSpan> spans;
  tokenizer.tokenize_with_offsets(text, ids, spans);
  CHECK(ids == spm_tokens(tokenizer, text));
  return spans;
}

}  // namespace

#if defined(SHARDTRAIN_SANITIZED)
// The sanitizer runtimes refuse the module's RTLD_DEEPBIND
// (src/data/tokenizer/sentencepiece_module.h): there a SentencePiece folder is refused,
// naming the file and why; the cases below run in the normal build.
TEST_CASE("Sanitizer build: SentencePiece tokenizers are refused with the reason") {
  CHECK_THROWS_WITH_AS(Tokenizer::from_model_dir(spm_path("data/vocab/deberta-v3")),
                       doctest::Contains("not available in a sanitizer build"), shardtrain::Error);
}
#else
TEST_CASE("DeBERTa-v3 spm.model: SentencePiece's ids on MRPC dev, SIB-200 (en, zh, ar) and edge cases") {
  const Tokenizer& t = spm_deberta();
  CHECK(std::string(t.type()) == "sentencepiece");
  CHECK(t.vocab_size() == 128001);  // 128,000 pieces, then [MASK]
  CHECK(t.cls_id() == 1);
  CHECK(t.sep_id() == 2);
  CHECK(t.pad_id() == 0);
  CHECK(t.unk_id() == 3);
  CHECK(t.mask_id() == 128000);
  CHECK(t.token(128000) == "[MASK]");
  CHECK(t.max_token_type(true) == 1);
  CHECK(spm_check_reference(t, "deberta-v3_ids.jsonl") == 408 + 3 * (99 + 204) + 18);
}

TEST_CASE("XLM-R layout (sentencepiece.bpe.model, spm_train Unigram): fairseq ids, SentencePiece's pieces") {
  const Tokenizer& t = spm_xlmr();
  CHECK(t.vocab_size() == 8002);  // <s> <pad> </s> <unk>, pieces 3.., <mask>
  CHECK(t.cls_id() == 0);
  CHECK(t.pad_id() == 1);
  CHECK(t.sep_id() == 2);
  CHECK(t.unk_id() == 3);
  CHECK(t.mask_id() == 8001);
  CHECK(t.token(8001) == "<mask>");
  CHECK(t.max_token_type(true) == 0);
  CHECK(t.num_special_tokens(true) == 4);
  spm_check_reference(t, "sib200-xlmr-8k_ids.jsonl");
}

TEST_CASE("A SentencePiece BPE model (spm_train --model_type=bpe) reads too") {
  const Tokenizer t = Tokenizer::from_model_dir(spm_path("tests/data/spm/bpe-1k"));
  CHECK(t.vocab_size() == 1002);
  spm_check_reference(t, "bpe-1k_ids.jsonl");
}

TEST_CASE("tokenizer.json Unigram (Precompiled, Metaspace, both schemas) gives the model file's ids") {
  const std::string json_text = spm_read("tests/data/spm/sib200-xlmr-8k.tokenizer.json");
  SpmFolder current;
  current.write("tokenizer.json", json_text);
  const Tokenizer t = Tokenizer::from_model_dir(current.scratch.dir);
  CHECK(t.vocab_size() == 8002);
  CHECK(t.mask_id() == 8001);
  spm_check_reference(t, "sib200-xlmr-8k_ids.jsonl");

  // The schema of tokenizers < 0.19 (xlm-roberta-base's tokenizer.json):
  // Metaspace add_prefix_space, Replace " {2,}" -> " ", no Strip.
  nlohmann::json old = nlohmann::json::parse(json_text);
  old["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"add_prefix_space", true}};
  old["normalizer"]["normalizers"] = nlohmann::json::array(
      {old["normalizer"]["normalizers"][0],
       {{"type", "Replace"}, {"pattern", {{"Regex", " {2,}"}}}, {"content", " "}}});
  SpmFolder legacy;
  legacy.write("tokenizer.json", old.dump());
  spm_check_reference(Tokenizer::from_model_dir(legacy.scratch.dir), "sib200-xlmr-8k_ids.jsonl");
}

TEST_CASE("CamemBERT layout: the same pieces four ids up, <s> 5, </s> 6, <mask> last") {
  SpmFolder folder;
  folder.write("sentencepiece.bpe.model", spm_read("data/vocab/sib200-xlmr-8k/sentencepiece.bpe.model"));
  folder.write("tokenizer_config.json", R"({"tokenizer_class": "CamembertTokenizerFast"})");
  const Tokenizer camembert = Tokenizer::from_model_dir(folder.scratch.dir);
  CHECK(camembert.vocab_size() == 8005);
  CHECK(camembert.cls_id() == 5);
  CHECK(camembert.sep_id() == 6);
  CHECK(camembert.pad_id() == 1);
  CHECK(camembert.unk_id() == 3);
  CHECK(camembert.mask_id() == 8004);
  CHECK(camembert.token(0) == "<s>NOTUSED");
  CHECK(camembert.token(4) == "<unk>NOTUSED");
  // XLM-R's piece id p (p >= 3) is CamemBERT's p + 3; unknown stays 3.
  for (const auto& [key, text] : spm_texts()) {
    if (key.first != "sib200_arb_Arab_dev" && key.first != "edge") continue;
    const SpmIds x = spm_tokens(spm_xlmr(), text.a);
    SpmIds expected;
    for (const int32_t id : x) expected.push_back(id == 3 ? 3 : id + 3);
    CHECK_MESSAGE(spm_tokens(camembert, text.a) == expected, text.a);
  }
  const Encoding pair = camembert.encode("a", std::string_view("b"), 0);
  CHECK(pair.input_ids.front() == 5);
  CHECK(pair.input_ids.back() == 6);
  // model_type camembert in config.json picks the layout too.
  SpmFolder by_model_type;
  by_model_type.write("sentencepiece.bpe.model", spm_read("data/vocab/sib200-xlmr-8k/sentencepiece.bpe.model"));
  by_model_type.write("config.json", R"({"model_type": "camembert"})");
  CHECK(Tokenizer::from_model_dir(by_model_type.scratch.dir).cls_id() == 5);
}

TEST_CASE("SentencePiece: added tokens are cut out first; pair templates and longest_first truncation") {
  const Tokenizer& d = spm_deberta();
  // [MASK] and [CLS] in the text are the special tokens, not pieces.
  SpmIds ids = spm_tokens(d, "a [MASK] b[CLS]");
  REQUIRE(ids.size() >= 4);
  CHECK(ids[1] == 128000);
  CHECK(ids.back() == 1);
  // XLM-R's <mask> takes the space before it (lstrip): "a <mask>" is ▁a <mask>.
  const Tokenizer& x = spm_xlmr();
  ids = spm_tokens(x, "a <mask>");
  REQUIRE(ids.size() == 2);
  CHECK(ids[1] == 8001);
  CHECK(spm_tokens(x, "<s></s><pad><unk>") == SpmIds{0, 2, 1, 3});

  // longest_first on a pair: DeBERTa [CLS] A [SEP] B [SEP], budget 10 - 3 = 7.
  const SpmText& row = spm_texts().at({"mrpc_dev", 0});
  const SpmIds a = spm_tokens(d, row.a), b = spm_tokens(d, *row.b);
  REQUIRE(a.size() > 4);
  REQUIRE(b.size() > 4);
  Encoding e = d.encode(row.a, std::string_view(*row.b), 10);
  SpmIds expected{1};
  const std::size_t keep_a = 7 / 2, keep_b = 7 - 7 / 2;  // both longer than half the budget
  const std::size_t first = a.size() <= b.size() ? keep_a : keep_b, second = a.size() <= b.size() ? keep_b : keep_a;
  expected.insert(expected.end(), a.begin(), a.begin() + static_cast<std::ptrdiff_t>(first));
  expected.push_back(2);
  expected.insert(expected.end(), b.begin(), b.begin() + static_cast<std::ptrdiff_t>(second));
  expected.push_back(2);
  CHECK(e.input_ids == expected);
  CHECK(e.token_type_ids == spm_types(d, expected, true));
  // XLM-R: <s> A </s></s> B </s>, 4 specials.
  e = x.encode(row.a, std::string_view(*row.b), 12);
  CHECK(e.input_ids.size() == 12);
  CHECK(e.input_ids[0] == 0);
  CHECK(e.input_ids[5] == 2);
  CHECK(e.input_ids[6] == 2);
  CHECK(e.input_ids[11] == 2);
  CHECK_THROWS_AS(x.encode("a", std::string_view("b"), 3), shardtrain::Error);

  // apply_template and encode_words.
  const SpmIds q{10, 11}, w{12};
  e = x.apply_template(q, &w);
  CHECK(e.input_ids == SpmIds{0, 10, 11, 2, 2, 12, 2});
  CHECK(e.sequence_ids == std::vector<int8_t>{-1, 0, 0, -1, -1, 1, -1});
  e = d.encode_words({"Hello", "world", ""}, 0, true);
  CHECK(e.input_ids == SpmIds{1, 5365, 447, 2});  // ▁Hello ▁world: each word has its "▁"
  CHECK(e.word_ids == std::vector<int32_t>{-1, 0, 1, -1});
  CHECK(e.offsets == spm_spans({{0, 0}, {0, 5}, {0, 5}, {0, 0}}));
}

TEST_CASE("SentencePiece offsets follow HF's Metaspace alignment") {
  const Tokenizer& d = spm_deberta();
  // ▁Hello 0-5; ▁world 5-11: the space became its "▁".
  CHECK(spm_offsets_of(d, "Hello world") == spm_spans({{0, 5}, {5, 11}}));
  // DeBERTa strips leading and trailing whitespace; a run of spaces is one
  // "▁" aligned with the run's last space: ▁Hello 2-7, ▁world 9-15.
  CHECK(spm_offsets_of(d, "  Hello   world  ") == spm_spans({{2, 7}, {9, 15}}));
  // XLM-R's converter strips only the right: the leading run's last space
  // is the first token's "▁": ▁Hello 1-7.
  const std::vector<TokenSpan> x = spm_offsets_of(spm_xlmr(), "  Hello");
  REQUIRE(!x.empty());
  CHECK(x.front().begin == 1);
  CHECK(x.back().end == 7);
  // NFKC-changed characters point at the original: fullwidth ＡＢＣ (9
  // bytes) is ▁ABC 0-9, then ▁ + digits from the space at 9.
  const std::vector<TokenSpan> fullwidth = spm_offsets_of(d, "\xEF\xBC\xA1\xEF\xBC\xA2\xEF\xBC\xA3 \xEF\xBC\x91");
  REQUIRE(fullwidth.size() == 2);
  CHECK(fullwidth == spm_spans({{0, 9}, {9, 13}}));
  // Byte fallback: the byte pieces of one character share its span; the
  // Tibetan sign (3 bytes) after the dummy "▁".
  const std::vector<TokenSpan> bytes = spm_offsets_of(d, "\xE0\xBC\x80");
  REQUIRE(bytes.size() == 4);  // ▁, then <0xE0> <0xBC> <0x80>
  CHECK(bytes[0] == TokenSpan{0, 3});
  for (std::size_t i = 1; i < bytes.size(); ++i) CHECK(bytes[i] == TokenSpan{0, 3});
  // Added tokens span what they matched; the text after them is normalized
  // on its own, so DeBERTa's Strip drops its leading space and "▁b" is b's.
  CHECK(spm_offsets_of(d, "a [MASK] b") == spm_spans({{0, 1}, {2, 8}, {9, 10}}));
  // encode_with_offsets: specials {0, 0}; the second text's spans are its own.
  const Encoding e = d.encode_with_offsets("Hello", std::string_view("world"), 0);
  CHECK(e.offsets == spm_spans({{0, 0}, {0, 5}, {0, 0}, {0, 5}, {0, 0}}));
  CHECK(e.sequence_ids == std::vector<int8_t>{-1, 0, -1, 1, -1});
}

TEST_CASE("SentencePiece tokenizers round-trip through saved files (checkpoints, export): the model as base64") {
  for (const Tokenizer* t : {&spm_deberta(), &spm_xlmr()}) {
    const nlohmann::json saved = nlohmann::json::parse(t->saved_files());
    const std::string model = saved.contains("spm.model") ? "spm.model" : "sentencepiece.bpe.model";
    REQUIRE(saved.contains(model));
    CHECK(saved[model].is_object());
    CHECK(saved[model].contains("base64"));
    const auto contents = Tokenizer::saved_file_contents(t->saved_files(), "ckpt");
    const std::string original =
        spm_read(model == "spm.model" ? "data/vocab/deberta-v3/spm.model" : "data/vocab/sib200-xlmr-8k/sentencepiece.bpe.model");
    CHECK(contents.at(model) == original);
    const Tokenizer back = Tokenizer::from_saved_files(t->saved_files(), "ckpt (attribute tokenizer_files)");
    CHECK(back.vocab_size() == t->vocab_size());
    for (const auto& [key, text] : spm_texts()) {
      if (key.first != "sib200_zho_Hans_dev") continue;
      CHECK(spm_tokens(back, text.a) == spm_tokens(*t, text.a));
    }
    // Written into a folder (what export does), it loads as itself.
    SpmFolder folder;
    for (const auto& [file, bytes] : contents) folder.write(file, bytes);
    CHECK(spm_tokens(Tokenizer::from_model_dir(folder.scratch.dir), "Hello world") == spm_tokens(*t, "Hello world"));
  }
  // The layout travels as tokenizer_class: a bare spm.model folder saved and reloaded stays DeBERTa.
  SpmFolder bare;
  bare.write("sentencepiece.bpe.model", spm_read("data/vocab/sib200-xlmr-8k/sentencepiece.bpe.model"));
  const Tokenizer named_by_file = Tokenizer::from_model_dir(bare.scratch.dir);
  const auto contents = Tokenizer::saved_file_contents(named_by_file.saved_files(), "ckpt");
  CHECK(nlohmann::json::parse(contents.at("tokenizer_config.json"))["tokenizer_class"] == "XLMRobertaTokenizer");
}

TEST_CASE("Damaged or unsupported SentencePiece files are refused naming the file and the field") {
  const std::string model = spm_read("data/vocab/sib200-xlmr-8k/sentencepiece.bpe.model");
  auto refused = [](const std::string& file, const std::string& bytes, const std::string& needle) {
    SpmFolder folder;
    folder.write(file, bytes);
    CHECK_THROWS_WITH_AS(Tokenizer::from_model_dir(folder.scratch.dir), doctest::Contains(needle.c_str()), shardtrain::Error);
    try {
      Tokenizer::from_model_dir(folder.scratch.dir);
    } catch (const shardtrain::Error& error) {
      CHECK_MESSAGE(std::string(error.what()).find(file) != std::string::npos, error.what());
    }
  };
  refused("sentencepiece.bpe.model", model.substr(0, model.size() / 2), "truncated or damaged");
  refused("sentencepiece.bpe.model", "", "is empty");
  refused("sentencepiece.bpe.model", "this is not a model at all", "ModelProto");
  std::string flipped = model;
  flipped[0] = static_cast<char>(0x0D);  // field 1 as fixed32: a wrong wire type
  refused("sentencepiece.bpe.model", flipped, "ModelProto: field pieces is fixed32, not length-delimited");
  // A WORD model (trainer_spec.model_type = 3) is refused by name.
  std::string word_model = model;
  const std::size_t at = word_model.find(std::string("\x18\x01", 2));  // trainer_spec field 3 = 1 (UNIGRAM)
  REQUIRE(at != std::string::npos);
  word_model[at + 1] = 3;
  refused("sentencepiece.bpe.model", word_model, "trainer_spec.model_type is WORD");
  // A DeBERTa spm.model whose first pieces are not <unk> <s> </s> cannot take the XLM-R layout.
  SpmFolder wrong_layout;
  wrong_layout.write("sentencepiece.bpe.model", spm_read("data/vocab/deberta-v3/spm.model"));
  CHECK_THROWS_WITH_AS(Tokenizer::from_model_dir(wrong_layout.scratch.dir),
                       doctest::Contains("pieces 0, 1, 2 must be <unk>, <s>, </s>"), shardtrain::Error);
  // A class shardtrain does not read.
  SpmFolder albert;
  albert.write("spiece.model", model);
  albert.write("tokenizer_config.json", R"({"tokenizer_class": "AlbertTokenizer"})");
  CHECK_THROWS_WITH_AS(Tokenizer::from_model_dir(albert.scratch.dir),
                       doctest::Contains("tokenizer_class 'AlbertTokenizer' is not a SentencePiece tokenizer"),
                       shardtrain::Error);

  // tokenizer.json: each broken field named.
  const nlohmann::json good = nlohmann::json::parse(spm_read("tests/data/spm/sib200-xlmr-8k.tokenizer.json"));
  auto refused_json = [](nlohmann::json root, const std::string& needle) {
    SpmFolder folder;
    folder.write("tokenizer.json", root.dump());
    CHECK_THROWS_WITH_AS(Tokenizer::from_model_dir(folder.scratch.dir), doctest::Contains(needle.c_str()), shardtrain::Error);
  };
  nlohmann::json broken = good;
  broken["normalizer"]["normalizers"][0]["precompiled_charsmap"] = "!!not base64!!";
  refused_json(broken, "tokenizer.json': normalizer Precompiled.precompiled_charsmap is not base64");
  broken = good;
  broken["normalizer"]["normalizers"][0]["precompiled_charsmap"] = "AAAA";
  refused_json(broken, "precompiled_charsmap is damaged");
  broken = good;
  broken["model"]["vocab"][7] = {"x"};
  refused_json(broken, "model.vocab[7] must be [piece, score]");
  broken = good;
  broken["model"]["unk_id"] = nullptr;
  refused_json(broken, "model.unk_id is null");
  broken = good;
  broken["pre_tokenizer"]["prepend_scheme"] = "first";
  refused_json(broken, "prepend_scheme \"first\" is not supported");
  broken = good;
  broken["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}};
  refused_json(broken, "Metaspace replacement \"_\" is not supported");
  broken = good;
  broken["normalizer"]["normalizers"][1] = {{"type", "NFKD"}};
  refused_json(broken, "normalizer type 'NFKD' is not supported with a Unigram model");
  broken = good;
  broken["model"]["byte_fallback"] = true;  // no <0x00> .. <0xFF> pieces
  refused_json(broken, "byte_fallback is set but the model has 0 BYTE pieces");
  broken = good;
  broken["post_processor"]["special_tokens"]["<s>"]["ids"] = {9000};
  refused_json(broken, "post_processor names token id 9000");
}
#endif  // SHARDTRAIN_SANITIZED
