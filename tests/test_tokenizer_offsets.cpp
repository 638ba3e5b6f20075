// Offsets, pre-split words, templates and truncation side of the WordPiece
// and byte-level BPE tokenizers (data/tokenizer.h).
//
// HF's Python `tokenizers` cannot be installed here, so the offsets are
// checked two ways:
// 1. Hand-derived cases. HF gives character offsets into the original text
//    (NormalizedString alignments); the expectations below are those
//    character offsets written as byte offsets (each comment gives the
//    characters). The rules they follow: a token spans from its first
//    character's origin to its last's; a character the normalizer removes
//    loses its origin (so an accent removed after the last kept character is
//    outside the span); characters a normalizer inserts take the origin of
//    the one before; RoBERTa's post-processor trims the Ġ space off a span,
//    ModernBERT's does not; template special tokens get {0, 0}.
// 2. A property test on all 408 MRPC dev pairs for bert-base-cased,
//    roberta-base and ModernBERT: the ids equal HF's (tests/data/), every
//    token's span holds exactly the text the token spells (WordPiece: the
//    piece without "##"; BPE: its bytes, less the trimmed spaces; the byte
//    tokens of one character share that character's span), and spans move
//    forward without overlapping.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <ostream>
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
using shardtrain::TokenizerOptions;
using shardtrain::TokenSpan;

const std::string& kOffsetsSourceDir = shardtrain_test::source_dir();

const Tokenizer& offsets_cased() { return shardtrain_test::bert_cased(); }
const Tokenizer& offsets_uncased() { return shardtrain_test::bert_uncased(); }
const Tokenizer& offsets_roberta() { return shardtrain_test::roberta_base(); }
const Tokenizer& offsets_modernbert() { return shardtrain_test::modernbert_tokenizer(); }

struct Tokens {
  std::vector<std::string> strings;
  std::vector<TokenSpan> spans;
};

Tokens offsets_of(const Tokenizer& tokenizer, std::string_view text) {
  std::vector<int32_t> ids;
  Tokens tokens;
  tokenizer.tokenize_with_offsets(text, ids, tokens.spans);
  REQUIRE(ids.size() == tokens.spans.size());
  std::vector<int32_t> plain;
  tokenizer.tokenize(text, plain);
  CHECK(ids == plain);  // offsets never change the ids
  for (const int32_t id : ids) tokens.strings.push_back(tokenizer.token(id));
  return tokens;
}

std::vector<TokenSpan> offsets_spans(std::initializer_list<std::pair<int, int>> list) {
  std::vector<TokenSpan> spans;
  for (const auto& [begin, end] : list) spans.push_back(TokenSpan{begin, end});
  return spans;
}

// A scratch folder for a tokenizer's files.
struct OffsetsTempDir {
  shardtrain_test::ScratchDir scratch{"test_offsets"};
  std::filesystem::path path{scratch.dir};
  void write(const std::string& name, const std::string& content) const {
    std::ofstream(path / name, std::ios::binary) << content;
  }
};

std::string offsets_read(const std::string& path) {
  const std::string text = shardtrain_test::read_whole_file(path);
  REQUIRE(!text.empty());
  return text;
}

}  // namespace

TEST_CASE("WordPiece offsets: punctuation, multi-byte characters before a token, CJK, special tokens") {
  // "Hello, world!": Hello 0-5, "," 5-6, world 7-12, "!" 12-13.
  Tokens t = offsets_of(offsets_cased(), "Hello, world!");
  CHECK(t.strings == std::vector<std::string>{"Hello", ",", "world", "!"});
  CHECK(t.spans == offsets_spans({{0, 5}, {5, 6}, {7, 12}, {12, 13}}));

  // "– über x": the dash (3 bytes) and ü (2 bytes) shift what follows:
  // characters "–"(0) " "(1) "ü"(2) "b"(3) "e"(4) "r"(5) " "(6) "x"(7) are
  // bytes 0-3, 3, 4-6, 6, 7, 8, 9, 10.
  t = offsets_of(offsets_cased(), "\xE2\x80\x93 \xC3\xBC" "ber x");
  REQUIRE(!t.strings.empty());
  CHECK(t.strings.front() == "\xE2\x80\x93");
  CHECK(t.spans.front() == TokenSpan{0, 3});
  CHECK(t.spans[1].begin == 4);      // über starts at ü
  CHECK(t.spans[t.spans.size() - 2].end == 9);
  CHECK(t.spans.back() == TokenSpan{10, 11});

  // CJK ideographs are words of their own: 日 本 are bytes 0-3, 3-6, then
  // "ok" after a space at 7-9.
  t = offsets_of(offsets_cased(), "\xE6\x97\xA5\xE6\x9C\xAC ok");
  CHECK(t.strings == std::vector<std::string>{"\xE6\x97\xA5", "\xE6\x9C\xAC", "ok"});
  CHECK(t.spans == offsets_spans({{0, 3}, {3, 6}, {7, 9}}));

  // A special token inside a word is cut out with its own span; an
  // ideographic space (U+3000, 3 bytes) separates words and is in no span.
  t = offsets_of(offsets_cased(), "a[SEP]b\xE3\x80\x80" "c");
  CHECK(t.strings == std::vector<std::string>{"a", "[SEP]", "b", "c"});
  CHECK(t.spans == offsets_spans({{0, 1}, {1, 6}, {6, 7}, {10, 11}}));

  // A dropped control character (U+200B, Cf, bytes 2-5) inside a word stays
  // inside its span; an invalid byte (dropped as U+FFFD) too.
  t = offsets_of(offsets_cased(), "ab\xE2\x80\x8B" "cd");
  REQUIRE(!t.spans.empty());
  CHECK(t.spans.front().begin == 0);
  CHECK(t.spans.back().end == 7);
  t = offsets_of(offsets_cased(), "x\xFFy z");
  REQUIRE(t.spans.size() >= 2);
  CHECK(t.spans.front().begin == 0);
  CHECK(t.spans[t.spans.size() - 2].end == 3);
  CHECK(t.spans.back() == TokenSpan{4, 5});

  // A word of more than 100 characters is one [UNK] over the whole word.
  const std::string long_word(101, 'a');
  t = offsets_of(offsets_cased(), "x " + long_word + " y");
  CHECK(t.strings == std::vector<std::string>{"x", "[UNK]", "y"});
  CHECK(t.spans == offsets_spans({{0, 1}, {2, 103}, {104, 105}}));
}

TEST_CASE("WordPiece offsets: accents stripped and case folded point at the original text") {
  // Uncased: "Héllo Wörld" -> hello world; é and ö are 2 bytes each.
  Tokens t = offsets_of(offsets_uncased(), "H\xC3\xA9llo W\xC3\xB6rld");
  CHECK(t.strings == std::vector<std::string>{"hello", "world"});
  CHECK(t.spans == offsets_spans({{0, 6}, {7, 13}}));

  // Decomposed input "cafe" + U+0301: the accent is removed after the last
  // kept character, so HF's span ends at the e (characters 0-4 of 5).
  t = offsets_of(offsets_uncased(), "Cafe\xCC\x81");
  CHECK(t.strings == std::vector<std::string>{"cafe"});
  CHECK(t.spans == offsets_spans({{0, 4}}));
  // ... and inside a word it is covered: "He" U+0301 "llo" -> hello, 0-7.
  t = offsets_of(offsets_uncased(), "He\xCC\x81llo");
  CHECK(t.strings == std::vector<std::string>{"hello"});
  CHECK(t.spans == offsets_spans({{0, 7}}));
  // Precomposed é decomposes to e + U+0301: both take é's span, the e
  // keeps it: "café" spans all 5 bytes.
  t = offsets_of(offsets_uncased(), "caf\xC3\xA9");
  CHECK(t.strings == std::vector<std::string>{"cafe"});
  CHECK(t.spans == offsets_spans({{0, 5}}));
  // İ (2 bytes) -> I + U+0307 -> i: "İstanbul" spans bytes 0-9.
  t = offsets_of(offsets_uncased(), "\xC4\xB0stanbul");
  REQUIRE(!t.spans.empty());
  CHECK(t.spans.front().begin == 0);
  CHECK(t.spans.back().end == 9);
  CHECK(t.strings.front().rfind("ist", 0) == 0);
}

TEST_CASE("encode_with_offsets: the template's specials are {0, 0}, sequence ids, truncation keeps the ids") {
  const Encoding e = offsets_cased().encode_with_offsets("Hello, world!", std::string_view("Hi there"), 0);
  const Encoding plain = offsets_cased().encode("Hello, world!", std::string_view("Hi there"), 0);
  CHECK(e.input_ids == plain.input_ids);
  CHECK(e.token_type_ids == plain.token_type_ids);
  CHECK(e.offsets == offsets_spans({{0, 0}, {0, 5}, {5, 6}, {7, 12}, {12, 13}, {0, 0}, {0, 2}, {3, 8}, {0, 0}}));
  CHECK(e.sequence_ids == std::vector<int8_t>{-1, 0, 0, 0, 0, -1, 1, 1, -1});
  CHECK(e.word_ids.empty());

  // An empty text: only the template, its offsets still there (a fuzz
  // finding: corpus/tokenizer/crash_offsets_empty_text).
  for (const Tokenizer* tokenizer : {&offsets_cased(), &offsets_roberta()}) {
    const Encoding empty = tokenizer->encode_with_offsets("", std::nullopt, 0);
    CHECK(empty.offsets == std::vector<TokenSpan>(2, TokenSpan{}));
    CHECK(empty.sequence_ids == std::vector<int8_t>{-1, -1});
    CHECK(tokenizer->encode_words({}, 0, true).word_ids == std::vector<int32_t>{-1, -1});
  }

  // longest_first to 6: budget 3, a keeps 2 (Hello ,), b keeps 1 (Hi).
  const Encoding cut = offsets_cased().encode_with_offsets("Hello, world!", std::string_view("Hi there"), 6);
  CHECK(cut.input_ids == offsets_cased().encode("Hello, world!", std::string_view("Hi there"), 6).input_ids);
  CHECK(cut.offsets == offsets_spans({{0, 0}, {0, 5}, {5, 6}, {0, 0}, {0, 2}, {0, 0}}));
  CHECK(cut.sequence_ids == std::vector<int8_t>{-1, 0, 0, -1, 1, -1});
}

TEST_CASE("Byte-level BPE offsets: RoBERTa trims the space, ModernBERT keeps it") {
  // roberta-base: RobertaProcessing(trim_offsets) -> "Ġworld" is 6-11.
  Tokens t = offsets_of(offsets_roberta(), "Hello world");
  CHECK(t.strings == std::vector<std::string>{"Hello", "\xC4\xA0world"});
  CHECK(t.spans == offsets_spans({{0, 5}, {6, 11}}));
  // A leading space is trimmed off the first token too (add_prefix_space
  // false): "ĠHello" is 1-6.
  t = offsets_of(offsets_roberta(), " Hello");
  CHECK(t.spans == offsets_spans({{1, 6}}));
  // Two spaces: "Hello", "Ġ" (trimmed to nothing, at 6), "Ġworld" 7-12.
  t = offsets_of(offsets_roberta(), "Hello  world");
  CHECK(t.strings == std::vector<std::string>{"Hello", "\xC4\xA0", "\xC4\xA0world"});
  CHECK(t.spans == offsets_spans({{0, 5}, {6, 6}, {7, 12}}));
  // <mask> takes the space before it (lstrip): its span is 1-8.
  t = offsets_of(offsets_roberta(), "a <mask>");
  CHECK(t.strings == std::vector<std::string>{"a", "<mask>"});
  CHECK(t.spans == offsets_spans({{0, 1}, {1, 8}}));
  // A multi-byte character before a token: "é" is bytes 0-2, " x" -> x at 3-4.
  t = offsets_of(offsets_roberta(), "\xC3\xA9 x");
  REQUIRE(t.spans.size() == 2);
  CHECK(t.spans == offsets_spans({{0, 2}, {3, 4}}));

  // ModernBERT: TemplateProcessing, no trimming: "Ġworld" is 5-11.
  t = offsets_of(offsets_modernbert(), "Hello world");
  CHECK(t.strings == std::vector<std::string>{"Hello", "\xC4\xA0world"});
  CHECK(t.spans == offsets_spans({{0, 5}, {5, 11}}));
  const Encoding e = offsets_modernbert().encode_with_offsets("Hello world", std::nullopt, 0);
  CHECK(e.offsets == offsets_spans({{0, 0}, {0, 5}, {5, 11}, {0, 0}}));
  CHECK(e.sequence_ids == std::vector<int8_t>{-1, 0, 0, -1});
}

TEST_CASE("Byte-level BPE offsets: an emoji's byte tokens share its span; NFC composition keeps the first origin") {
  // 😀 is 4 bytes and no token of roberta-base: its byte pieces all span 0-4.
  for (const Tokenizer* tokenizer : {&offsets_roberta(), &offsets_modernbert()}) {
    const Tokens t = offsets_of(*tokenizer, "\xF0\x9F\x98\x80");
    REQUIRE(t.spans.size() >= 2);
    for (const TokenSpan& span : t.spans) CHECK(span == TokenSpan{0, 4});
  }
  // ModernBERT normalizes with NFC: "cafe" + U+0301 becomes "café"; the
  // composed é takes the e's origin and the accent's is dropped, so the
  // last token ends at byte 4 (HF: character 4 of 5).
  const Tokens t = offsets_of(offsets_modernbert(), "cafe\xCC\x81");
  REQUIRE(!t.spans.empty());
  CHECK(t.spans.front().begin == 0);
  CHECK(t.spans.back().end == 4);
  // The aligned normalization gives the text the plain one gives (offsets_of
  // checks the ids): Hangul jamo composing, marks out of canonical order,
  // a compatibility ligature, a lone mark first.
  for (const char* text : {"\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB \xED\x95\x9C", "e\xCC\x82\xCC\xA3x",
                           "\xEF\xAC\x81ne", "\xCC\x81" "a", "A\xCC\x8A\xE2\x84\xAB"}) {
    const Tokens aligned = offsets_of(offsets_modernbert(), text);
    CHECK(!aligned.spans.empty());
  }
  std::vector<int32_t> composed, decomposed;
  offsets_modernbert().tokenize("caf\xC3\xA9", composed);
  offsets_modernbert().tokenize("cafe\xCC\x81", decomposed);
  CHECK(composed == decomposed);
}

TEST_CASE("encode_words: each word on its own, word ids, offsets per word, truncation") {
  // WordPiece: "U.S." still splits on punctuation.
  Encoding e = offsets_cased().encode_words({"U.S.", "is", "big"}, 0, false);
  std::vector<std::string> strings;
  for (const int32_t id : e.input_ids) strings.push_back(offsets_cased().token(id));
  CHECK(strings == std::vector<std::string>{"[CLS]", "U", ".", "S", ".", "is", "big", "[SEP]"});
  CHECK(e.word_ids == std::vector<int32_t>{-1, 0, 0, 0, 0, 1, 2, -1});
  CHECK(e.offsets == offsets_spans({{0, 0}, {0, 1}, {1, 2}, {2, 3}, {3, 4}, {0, 2}, {0, 3}, {0, 0}}));
  CHECK(e.sequence_ids == std::vector<int8_t>{-1, 0, 0, 0, 0, 0, 0, -1});
  CHECK(e.token_type_ids == std::vector<uint8_t>(8, 0));

  // A word that tokenizes to nothing gives no token; truncation to 4 keeps
  // the first 2 tokens (the caller sees word 2 lost in word_ids).
  e = offsets_cased().encode_words({"a", "\x01", "b", "c"}, 4, false);
  CHECK(e.word_ids == std::vector<int32_t>{-1, 0, 2, -1});

  // RoBERTa with add_prefix_space (run_ner): every word gets "Ġ", and the
  // post-processor keeps the added space in the first token's span (0-5 of
  // each word).
  e = offsets_roberta().encode_words({"Hello", "world", ""}, 0, true);
  strings.clear();
  for (const int32_t id : e.input_ids) strings.push_back(offsets_roberta().token(id));
  CHECK(strings == std::vector<std::string>{"<s>", "\xC4\xA0Hello", "\xC4\xA0world", "</s>"});
  CHECK(e.word_ids == std::vector<int32_t>{-1, 0, 1, -1});
  CHECK(e.offsets == offsets_spans({{0, 0}, {0, 5}, {0, 5}, {0, 0}}));
  // Without it the words are tokenized as written: "Hello" then "world".
  e = offsets_roberta().encode_words({"Hello", "world"}, 0, false);
  CHECK(offsets_roberta().token(e.input_ids[2]) == "world");
  CHECK_THROWS_AS(offsets_roberta().encode_words({"a"}, 1, true), shardtrain::Error);
}

TEST_CASE("apply_template: ids and type ids around given sequences, sequence ids") {
  Encoding e = offsets_roberta().apply_template({10, 11}, nullptr);
  CHECK(e.input_ids == std::vector<int32_t>{0, 10, 11, 2});
  CHECK(e.sequence_ids == std::vector<int8_t>{-1, 0, 0, -1});
  const std::vector<int32_t> b{12};
  e = offsets_roberta().apply_template({10, 11}, &b);
  CHECK(e.input_ids == std::vector<int32_t>{0, 10, 11, 2, 2, 12, 2});
  CHECK(e.token_type_ids == std::vector<uint8_t>(7, 0));
  CHECK(e.sequence_ids == std::vector<int8_t>{-1, 0, 0, -1, -1, 1, -1});
  e = offsets_cased().apply_template({10, 11}, &b);
  CHECK(e.input_ids == std::vector<int32_t>{offsets_cased().cls_id(), 10, 11, offsets_cased().sep_id(), 12,
                                            offsets_cased().sep_id()});
  CHECK(e.token_type_ids == std::vector<uint8_t>{0, 0, 0, 0, 1, 1});
  CHECK(e.offsets.empty());
}

TEST_CASE("Truncation side: tokenizer.json's truncation.direction Left and truncation_side left cut from the left") {
  // tokenizer.json with "truncation": {"direction": "Left", ...}.
  nlohmann::json root =
      nlohmann::json::parse(offsets_read(kOffsetsSourceDir + "/data/vocab/roberta-base/tokenizer.json"));
  root["truncation"] = {{"direction", "Left"}, {"max_length", 512}, {"strategy", "LongestFirst"}, {"stride", 0}};
  OffsetsTempDir dir;
  dir.write("tokenizer.json", root.dump());
  const Tokenizer left = Tokenizer::from_model_dir(dir.path.string());
  CHECK(left.truncation_left());
  CHECK(!offsets_roberta().truncation_left());
  // " a b c d" is Ġa Ġb Ġc Ġd after "one": keep the last 2 of 5.
  std::vector<int32_t> all;
  left.tokenize("one a b c d", all);
  REQUIRE(all.size() == 5);
  Encoding e = left.encode_with_offsets("one a b c d", std::nullopt, 4);
  CHECK(e.input_ids == std::vector<int32_t>{0, all[3], all[4], 2});
  CHECK(e.offsets == offsets_spans({{0, 0}, {8, 9}, {10, 11}, {0, 0}}));
  CHECK(offsets_roberta().encode("one a b c d", std::nullopt, 4).input_ids ==
        std::vector<int32_t>{0, all[0], all[1], 2});
  // Pairs: longest_first counts, each side keeps its last tokens.
  // Budget 7 - 4 = 3 for 5 and 2 tokens: a keeps its last 2, b its last 1.
  e = left.encode("one a b c d", std::string_view("x y"), 7);
  std::vector<int32_t> b_ids;
  left.tokenize("x y", b_ids);
  CHECK(e.input_ids == std::vector<int32_t>{0, all[3], all[4], 2, 2, b_ids[1], 2});
  // encode_words cuts from the left too.
  e = left.encode_words({"p", "q", "r"}, 4, true);
  CHECK(e.word_ids == std::vector<int32_t>{-1, 1, 2, -1});

  // tokenizer_config.json's truncation_side wins over tokenizer.json's.
  dir.write("tokenizer_config.json", R"({"truncation_side": "right"})");
  CHECK(!Tokenizer::from_model_dir(dir.path.string()).truncation_left());
  // A vocab.txt folder with truncation_side left.
  OffsetsTempDir wordpiece;
  wordpiece.write("vocab.txt", offsets_read(kOffsetsSourceDir + "/data/vocab/bert-base-cased-vocab.txt"));
  wordpiece.write("tokenizer_config.json", R"({"do_lower_case": false, "truncation_side": "left"})");
  const Tokenizer wp = Tokenizer::from_model_dir(wordpiece.path.string());
  CHECK(wp.truncation_left());
  std::vector<int32_t> words;
  wp.tokenize("one two three", words);
  REQUIRE(words.size() == 3);
  CHECK(wp.encode("one two three", std::nullopt, 3).input_ids ==
        std::vector<int32_t>{wp.cls_id(), words[2], wp.sep_id()});
  // ... which survives a checkpoint's saved files.
  CHECK(Tokenizer::from_saved_files(wp.saved_files(), "saved").truncation_left());
  wordpiece.write("tokenizer_config.json", R"({"do_lower_case": false, "truncation_side": "middle"})");
  CHECK_THROWS_WITH_AS(Tokenizer::from_model_dir(wordpiece.path.string()),
                       doctest::Contains("truncation_side must be \"left\" or \"right\""), shardtrain::Error);
}

namespace {

enum class OffsetsKind { kWordPiece, kTrimmedBpe, kBpe };

// One sequence's tokens against its text (see the top of this file).
void offsets_check_sequence(const Tokenizer& tokenizer, OffsetsKind kind, const std::string& text,
                            const std::vector<int32_t>& ids, const std::vector<TokenSpan>& spans, std::size_t row) {
  REQUIRE(ids.size() == spans.size());
  int32_t previous_end = 0;
  for (std::size_t i = 0; i < ids.size();) {
    // Tokens sharing a span (byte tokens of one character) are checked together.
    std::size_t j = i + 1;
    while (j < ids.size() && spans[j] == spans[i]) ++j;
    const TokenSpan span = spans[i];
    CHECK_MESSAGE(span.begin >= previous_end, "row ", row, " token ", i, ": spans overlap");
    CHECK_MESSAGE((span.begin <= span.end && span.end <= static_cast<int32_t>(text.size())), "row ", row);
    const std::string covered = text.substr(static_cast<std::size_t>(span.begin),
                                            static_cast<std::size_t>(span.end - span.begin));
    std::string spelled;
    for (std::size_t k = i; k < j; ++k) {
      const std::string& token = tokenizer.token(ids[k]);
      if (kind == OffsetsKind::kWordPiece) {
        spelled += token.rfind("##", 0) == 0 ? token.substr(2) : token;
      } else {
        if (!shardtrain_test::byte_level_bytes(token, spelled)) spelled += token;  // an added token
      }
    }
    if (kind == OffsetsKind::kTrimmedBpe) {
      while (!spelled.empty() && spelled.front() == ' ') spelled.erase(0, 1);
      while (!spelled.empty() && spelled.back() == ' ') spelled.pop_back();
    }
    if (kind == OffsetsKind::kBpe) {
      CHECK_MESSAGE(span.begin == previous_end, "row ", row, ": ModernBERT's spans cover every byte");
    }
    if (!(kind == OffsetsKind::kWordPiece && spelled == "[UNK]")) {
      CHECK_MESSAGE(covered == spelled, "row ", row, " token ", i, ": span holds '", covered, "', token spells '",
                    spelled, "'");
    }
    previous_end = span.end;
    i = j;
  }
  if (kind == OffsetsKind::kBpe) CHECK(previous_end == static_cast<int32_t>(text.size()));
}

void offsets_check_mrpc(const Tokenizer& tokenizer, const std::string& reference_file, OffsetsKind kind) {
  std::ifstream tsv(kOffsetsSourceDir + "/data/glue/MRPC/dev.tsv", std::ios::binary);
  std::ifstream reference(kOffsetsSourceDir + "/tests/data/" + reference_file);
  REQUIRE(tsv);
  REQUIRE(reference);
  std::string line, json_line;
  std::getline(tsv, line);
  std::size_t row = 0;
  while (std::getline(tsv, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const std::vector<std::string> fields = shardtrain_test::split_tabs(line);
    REQUIRE(fields.size() == 5);
    REQUIRE(std::getline(reference, json_line));
    const nlohmann::json expected = nlohmann::json::parse(json_line);
    const Encoding e = tokenizer.encode_with_offsets(fields[3], std::string_view(fields[4]), 0);
    CHECK_MESSAGE(e.input_ids == expected["input_ids"].get<std::vector<int32_t>>(), "row ", row);
    REQUIRE(e.offsets.size() == e.input_ids.size());
    REQUIRE(e.sequence_ids.size() == e.input_ids.size());
    for (const int sequence : {0, 1}) {
      std::vector<int32_t> ids;
      std::vector<TokenSpan> spans;
      for (std::size_t k = 0; k < e.input_ids.size(); ++k) {
        if (e.sequence_ids[k] < 0) CHECK(e.offsets[k] == TokenSpan{});
        if (e.sequence_ids[k] != sequence) continue;
        ids.push_back(e.input_ids[k]);
        spans.push_back(e.offsets[k]);
      }
      offsets_check_sequence(tokenizer, kind, fields[3 + sequence], ids, spans, row);
    }
    ++row;
  }
  CHECK(row == 408);
}

}  // namespace

TEST_CASE("Offsets on all 408 MRPC dev pairs: bert-base-cased, roberta-base, ModernBERT (ids equal HF's)") {
  offsets_check_mrpc(offsets_cased(), "mrpc_dev_bert-base-cased_ids.jsonl", OffsetsKind::kWordPiece);
  offsets_check_mrpc(offsets_roberta(), "mrpc_dev_roberta-base_ids.jsonl", OffsetsKind::kTrimmedBpe);
  offsets_check_mrpc(offsets_modernbert(), "mrpc_dev_modernbert_ids.jsonl", OffsetsKind::kBpe);
}
