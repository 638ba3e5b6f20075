// BERT WordPiece tokenizer: exact ids against Hugging Face.
//
// 1. All 408 MRPC dev pairs against ids that HF BertTokenizerFast
//    (bert-base-cased) produced (tests/data/mrpc_dev_bert-base-cased_ids.jsonl).
// 2. Hand-derived cases: every expected id below is a 0-based line index in
//    data/vocab/bert-base-{cased,uncased}-vocab.txt (grep -nx TOKEN, minus 1),
//    and each comment gives the HF steps that lead to the tokens.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "shardtrain/core/check.h"
#include "shardtrain/data/tokenizer.h"
#include "support/tokenizer_fixtures.h"

namespace {

using shardtrain::Encoding;
using shardtrain::Tokenizer;
using shardtrain::TokenizerOptions;
using Ids = std::vector<int32_t>;

const std::string kSourceDir = SHARDTRAIN_SOURCE_DIR;
const std::string kCasedVocab = kSourceDir + "/data/vocab/bert-base-cased-vocab.txt";
const std::string kUncasedVocab = kSourceDir + "/data/vocab/bert-base-uncased-vocab.txt";

const Tokenizer& cased() {
  static const Tokenizer tokenizer = Tokenizer::from_vocab_file(kCasedVocab, TokenizerOptions{});
  return tokenizer;
}

const Tokenizer& uncased() {
  static const Tokenizer tokenizer = [] {
    TokenizerOptions options;
    options.lowercase = true;
    return Tokenizer::from_vocab_file(kUncasedVocab, options);
  }();
  return tokenizer;
}

Ids tokens_of(const Tokenizer& tokenizer, std::string_view text) {
  Ids ids;
  tokenizer.tokenize(text, ids);
  return ids;
}

// A scratch folder under the system temp dir, removed at scope exit.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("shardtrain_test_tokenizer_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  std::string write(const std::string& name, const std::string& content) const {
    const std::string file = (path / name).string();
    std::ofstream(file, std::ios::binary) << content;
    return file;
  }
  static int& counter() {
    static int value = 0;
    return value;
  }
};

std::string read_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("MRPC dev: all 408 pairs match HF BertTokenizerFast (bert-base-cased) exactly") {
  // The reference was produced without truncation (longest pair: 88 ids), so
  // encode with max_length 0; the check below asserts that assumption.
  std::ifstream tsv(kSourceDir + "/data/glue/MRPC/dev.tsv", std::ios::binary);
  std::ifstream reference(kSourceDir + "/tests/data/mrpc_dev_bert-base-cased_ids.jsonl");
  REQUIRE(tsv);
  REQUIRE(reference);

  std::string header;
  std::getline(tsv, header);
  REQUIRE(header.rfind("\xEF\xBB\xBFQuality\t", 0) == 0);
  const std::vector<std::string> columns = shardtrain_test::split_tabs(header);
  REQUIRE(columns.size() == 5);
  CHECK(columns[3] == "#1 String");
  CHECK(columns[4] == "#2 String");

  std::size_t row = 0, longest = 0;
  std::string line, json_line;
  while (std::getline(tsv, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const std::vector<std::string> fields = shardtrain_test::split_tabs(line);
    REQUIRE_MESSAGE(fields.size() == 5, "dev.tsv row ", row + 1);
    REQUIRE_MESSAGE(std::getline(reference, json_line), "reference ends before row ", row);
    const nlohmann::json expected = nlohmann::json::parse(json_line);
    REQUIRE(expected["idx"].get<std::size_t>() == row);

    const Encoding encoding = cased().encode(fields[3], std::string_view(fields[4]), 0);
    const auto expected_ids = expected["input_ids"].get<std::vector<int32_t>>();
    const auto expected_types = expected["token_type_ids"].get<std::vector<int>>();
    const std::vector<int> types(encoding.token_type_ids.begin(), encoding.token_type_ids.end());
    CHECK_MESSAGE(encoding.input_ids == expected_ids, "row ", row, ": ", fields[3], " ||| ", fields[4]);
    CHECK_MESSAGE(types == expected_types, "row ", row);
    longest = std::max(longest, expected_ids.size());
    ++row;
  }
  CHECK(row == 408);
  CHECK(!std::getline(reference, json_line));
  CHECK(longest == 88);  // under any max_length HF uses for MRPC (128): no truncation happened
}

TEST_CASE("vocabulary facts the other tests rely on") {
  CHECK(cased().vocab_size() == 28996);
  CHECK(uncased().vocab_size() == 30522);
  for (const Tokenizer* tokenizer : {&cased(), &uncased()}) {
    CHECK(tokenizer->pad_id() == 0);
    CHECK(tokenizer->unk_id() == 100);
    CHECK(tokenizer->cls_id() == 101);
    CHECK(tokenizer->sep_id() == 102);
    CHECK(tokenizer->mask_id() == 103);
    CHECK(tokenizer->token(101) == "[CLS]");
  }
  CHECK(cased().token(2744) == "##é");
  CHECK(cased().token_to_id("Café") == 21036);
  CHECK(cased().token_to_id("no-such-token") == -1);
  CHECK_THROWS_AS(cased().token(28996), shardtrain::Error);
  CHECK_THROWS_AS(cased().token(-1), shardtrain::Error);
}

TEST_CASE("accents: cased keeps them, uncased strips them (NFD, drop Mn) before lowercasing") {
  // cased: "Café" is a vocab entry (21036).
  CHECK(tokens_of(cased(), "Café") == Ids{21036});
  // cased, decomposed input "Cafe\u0301": the cased pipeline applies neither NFC
  // nor NFD, so the word is C a f e U+0301: longest prefix "Cafe" (18375), then
  // "##\u0301" (28310).
  CHECK(tokens_of(cased(), "Cafe\xCC\x81") == Ids{18375, 28310});
  // uncased: NFD "Cafe\u0301" -> drop U+0301 -> "Cafe" -> lowercase "cafe" (7668).
  CHECK(tokens_of(uncased(), "Café") == Ids{7668});
  CHECK(tokens_of(uncased(), "CAFE\xCC\x81") == Ids{7668});
  // cased "Naïve": no token starts with "Naï"; longest prefix "Na" (11896), then
  // "##ïve"/"##ïv" absent, "##ï" (28203), then "##ve" (2707).
  CHECK(tokens_of(cased(), "Naïve") == Ids{11896, 28203, 2707});
  // uncased: "naive" (15743).
  CHECK(tokens_of(uncased(), "Naïve") == Ids{15743});
  // U+0130 (İ): NFD = I U+0307, the mark is dropped, then "istanbul" (9960).
  CHECK(tokens_of(uncased(), "\xC4\xB0stanbul") == Ids{9960});
  // HF strip_accents=False with do_lower_case=True: İ lowercases to i U+0307
  // (full mapping), "i\u0307stanbul" has no segmentation ("##\u0307..." is not in
  // the vocab) -> [UNK].
  TokenizerOptions keep;
  keep.lowercase = true;
  keep.keep_accents = true;
  const Tokenizer lower_keep = Tokenizer::from_vocab_file(kUncasedVocab, keep);
  CHECK(!lower_keep.options().strips_accents());
  CHECK(tokens_of(lower_keep, "\xC4\xB0stanbul") == Ids{100});
  // ...and "Café" lowercases to "café" (not in the uncased vocab): longest
  // prefix "caf" (24689), then "##é" is absent -> the whole word is [UNK].
  CHECK(tokens_of(lower_keep, "Café") == Ids{100});
  // strip_accents without lowercase (HF strip_accents=True, do_lower_case=False).
  TokenizerOptions strip_only;
  strip_only.strip_accents = true;
  const Tokenizer cased_stripped = Tokenizer::from_vocab_file(kCasedVocab, strip_only);
  // "Café" -> NFD, drop U+0301 -> "Cafe" (18375), no lowercasing.
  CHECK(tokens_of(cased_stripped, "Café") == Ids{18375});
  TokenizerOptions contradictory;
  contradictory.strip_accents = true;
  contradictory.keep_accents = true;
  CHECK_THROWS_AS(Tokenizer::from_vocab_file(kCasedVocab, contradictory), shardtrain::Error);
}

TEST_CASE("CJK ideographs become their own words") {
  // 中 (980) and 文 (1030) are separate words even without spaces.
  CHECK(tokens_of(cased(), "中文") == Ids{980, 1030});
  CHECK(tokens_of(cased(), "a中b") == Ids{170, 980, 171});
  // tokenize_chinese_chars=false: "中文" is one word: "中" then "##文" (28923).
  TokenizerOptions no_cjk;
  no_cjk.tokenize_chinese_chars = false;
  const Tokenizer plain = Tokenizer::from_vocab_file(kCasedVocab, no_cjk);
  CHECK(tokens_of(plain, "中文") == Ids{980, 28923});
  // Uncased vocab: 中 (1746) 文 (1861).
  CHECK(tokens_of(uncased(), "中文") == Ids{1746, 1861});
  // Hiragana is not in the CJK ranges: "いい" stays one word, "い" (894) + "##い"
  // (28787); split like CJK it would be 894 894.
  CHECK(tokens_of(cased(), "いい") == Ids{894, 28787});
}

TEST_CASE("emoji and other characters missing from the vocab become [UNK]") {
  CHECK(cased().token_to_id("😀") == -1);
  CHECK(tokens_of(cased(), "😀") == Ids{100});
  // "a😀": "a" (170), then "##😀" absent -> the whole word is one [UNK].
  CHECK(tokens_of(cased(), "a😀 b") == Ids{100, 171});
  // Unassigned code point U+0378 (Cn) is kept by HF's fast tokenizer (its
  // is_control covers Cc/Cf/Co only): "He\u0378llo" has no segmentation -> [UNK].
  CHECK(tokens_of(cased(), "He\xCD\xB8llo") == Ids{100});
}

TEST_CASE("control characters are dropped; \\t \\n \\r and Unicode spaces separate words") {
  // Hello = 8667.
  CHECK(tokens_of(cased(), std::string("\x00Hel\x01lo\x7f", 9)) == Ids{8667});
  CHECK(tokens_of(cased(), "Hel\xEF\xBF\xBDlo") == Ids{8667});      // U+FFFD
  CHECK(tokens_of(cased(), "Hel\xE2\x80\x8Blo") == Ids{8667});      // U+200B ZWSP (Cf)
  CHECK(tokens_of(cased(), "\xEF\xBB\xBFHello") == Ids{8667});      // U+FEFF BOM (Cf)
  CHECK(tokens_of(cased(), "Hel\xEE\x80\x80lo") == Ids{8667});      // U+E000 private use (Co)
  // \v \f and U+0085 are Cc: dropped before whitespace mapping, so they JOIN:
  // "ab" is not a token -> "a" (170) + "##b" (1830).
  CHECK(tokens_of(cased(), "a\vb") == Ids{170, 1830});
  CHECK(tokens_of(cased(), "a\fb") == Ids{170, 1830});
  CHECK(tokens_of(cased(), "a\xC2\x85" "b") == Ids{170, 1830});
  // \t \n \r \r\n, U+00A0, U+3000, U+2028, U+2029, U+2009 all separate: a..h = 170..177.
  CHECK(tokens_of(cased(), "a\tb\nc\r\nd\xC2\xA0" "e\xE3\x80\x80" "f\xE2\x80\xA8g\xE2\x80\xA9h") ==
        Ids{170, 171, 172, 173, 174, 175, 176, 177});
  CHECK(tokens_of(cased(), "  \t a\xE2\x80\x89  b \n") == Ids{170, 171});
  CHECK(tokens_of(cased(), " \t\r\n ").empty());
}

TEST_CASE("punctuation splits, ASCII and Unicode") {
  // "Hello, world!" -> Hello (8667) , (117) world (1362) ! (106).
  CHECK(tokens_of(cased(), "Hello, world!") == Ids{8667, 117, 1362, 106});
  // Em dash U+2014 is Pd: a — b -> 170 783 171.
  CHECK(tokens_of(cased(), "a\xE2\x80\x94" "b") == Ids{170, 783, 171});
  // "$" (109), "^" (167), "`" (169) are ASCII punctuation though category S.
  CHECK(tokens_of(cased(), "a$b") == Ids{170, 109, 171});
  CHECK(tokens_of(cased(), "a^b`c") == Ids{170, 167, 171, 169, 172});
}

TEST_CASE("words longer than 100 code points become [UNK]") {
  // 100 x "a": "a" (170); no "aa"/"aaa" entry, the longest all-"a" continuation
  // is "##aa" (22118): 49 of them cover 98 more, then "##a" (1161).
  Ids expected{170};
  expected.insert(expected.end(), 49, 22118);
  expected.push_back(1161);
  CHECK(tokens_of(cased(), std::string(100, 'a')) == expected);
  CHECK(tokens_of(cased(), std::string(101, 'a')) == Ids{100});
  // The limit counts code points, not bytes: 100 x "é" (200 bytes) is not [UNK]
  // for length reasons: "é" (255) then 99 x "##é" (2744).
  std::string e100;
  for (int i = 0; i < 100; ++i) e100 += "é";
  Ids expected_e{255};
  expected_e.insert(expected_e.end(), 99, 2744);
  CHECK(tokens_of(cased(), e100) == expected_e);
  CHECK(tokens_of(cased(), e100 + "é") == Ids{100});
}

TEST_CASE("empty texts") {
  const Encoding pair = cased().encode("", std::string_view(""), 0);
  CHECK(pair.input_ids == Ids{101, 102, 102});
  CHECK(pair.token_type_ids == std::vector<uint8_t>{0, 0, 1});
  const Encoding single = cased().encode("", std::nullopt, 0);
  CHECK(single.input_ids == Ids{101, 102});
  CHECK(single.token_type_ids == std::vector<uint8_t>{0, 0});
  CHECK(tokens_of(cased(), "").empty());
}

TEST_CASE("invalid UTF-8 reads as U+FFFD, which cleaning drops; never throws") {
  CHECK(tokens_of(cased(), "Hel\xFFlo") == Ids{8667});
  CHECK(tokens_of(cased(), "Hel\xC3lo") == Ids{8667});            // lead byte without continuation
  CHECK(tokens_of(cased(), "Hel\xED\xA0\x80lo") == Ids{8667});    // UTF-8 encoded surrogate
  CHECK(tokens_of(cased(), "Hel\xC0\xAFlo") == Ids{8667});        // overlong "/" must not split
  CHECK(tokens_of(cased(), "Hel\xF4\x90\x80\x80lo") == Ids{8667});  // above U+10FFFF
  CHECK(tokens_of(cased(), "Hello\xE2\x82") == Ids{8667});         // truncated at the end
  CHECK(tokens_of(cased(), "\x80\x80\x80") == Ids{});
  // A valid character right after an invalid byte is kept: "\xE2(" -> "(" (113).
  CHECK(tokens_of(cased(), "\xE2(") == Ids{113});
  // Arbitrary bytes: no crash, and every id is in range.
  std::string noise;
  for (int i = 0; i < 4096; ++i) noise.push_back(static_cast<char>((i * 7919 + 13) & 0xFF));
  Ids ids;
  CHECK_NOTHROW(cased().tokenize(noise, ids));
  CHECK_NOTHROW(uncased().tokenize(noise, ids));
  for (const int32_t id : ids) CHECK((id >= 0 && id < 30522));
}

TEST_CASE("special tokens in the text are never split") {
  // Matched in the raw text, even inside words: Hello (8667) [SEP] (102) world (1362).
  CHECK(tokens_of(cased(), "Hello [SEP] world") == Ids{8667, 102, 1362});
  CHECK(tokens_of(cased(), "x[MASK]y") == Ids{193, 103, 194});
  CHECK(tokens_of(cased(), "[CLS][PAD][UNK]") == Ids{101, 0, 100});
  // Not a complete special token: "[" (164), "SE" (12342), "##P" (2101).
  CHECK(tokens_of(cased(), "[SEP") == Ids{164, 12342, 2101});
  // Case-sensitive, before lowercasing: uncased "[sep]" is "[" (1031) "sep"
  // (19802) "]" (1033); "[SEP]" stays 102.
  CHECK(tokens_of(uncased(), "[sep]") == Ids{1031, 19802, 1033});
  CHECK(tokens_of(uncased(), "A[SEP]B") == Ids{1037, 102, 1038});  // a, [SEP], b
  // In a pair, an inline [SEP] takes the type of its segment.
  const Encoding pair = cased().encode("a [SEP] b", std::string_view("c"), 0);
  CHECK(pair.input_ids == Ids{101, 170, 102, 171, 102, 172, 102});
  CHECK(pair.token_type_ids == std::vector<uint8_t>{0, 0, 0, 0, 0, 1, 1});
}

TEST_CASE("pair truncation follows HF longest_first (tokenizers truncate_encodings)") {
  // Letters a..h are single tokens 170..177, so word counts are token counts.
  const std::string_view four = "a b c d", eight = "a b c d e f g h", two = "a b";
  auto lengths = [](const Encoding& e) {
    std::size_t first_sep = 0;
    while (e.input_ids[first_sep] != 102) ++first_sep;
    return std::make_pair(first_sep - 1, e.input_ids.size() - first_sep - 2);
  };
  // Equal lengths 4+4, budget 10-3 = 7 (odd): a gets 7/2 = 3, b gets 4.
  const Encoding tie = cased().encode(four, four, 10);
  CHECK(tie.input_ids == Ids{101, 170, 171, 172, 102, 170, 171, 172, 173, 102});
  CHECK(tie.token_type_ids == std::vector<uint8_t>{0, 0, 0, 0, 0, 1, 1, 1, 1, 1});
  CHECK(lengths(cased().encode(four, four, 9)) == std::make_pair<std::size_t, std::size_t>(3, 3));
  // 8+4, budget 7: the shorter (4) does not fit in half, both cut: shorter 3, longer 4.
  CHECK(lengths(cased().encode(eight, four, 10)) == std::make_pair<std::size_t, std::size_t>(4, 3));
  CHECK(lengths(cased().encode(four, eight, 10)) == std::make_pair<std::size_t, std::size_t>(3, 4));
  // 2+8, budget 7: the shorter fits in half, only the longer is cut to 7-2 = 5.
  const Encoding one_side = cased().encode(two, eight, 10);
  CHECK(one_side.input_ids == Ids{101, 170, 171, 102, 170, 171, 172, 173, 174, 102});
  CHECK(lengths(cased().encode(eight, two, 10)) == std::make_pair<std::size_t, std::size_t>(5, 2));
  // Fits exactly: nothing cut.
  CHECK(lengths(cased().encode(four, four, 11)) == std::make_pair<std::size_t, std::size_t>(4, 4));
  // Empty second text, budget 2: the first is cut to 2.
  CHECK(lengths(cased().encode(four, std::string_view(""), 5)) == std::make_pair<std::size_t, std::size_t>(2, 0));
  // Budget 0: only the special tokens remain.
  CHECK(cased().encode(four, four, 3).input_ids == Ids{101, 102, 102});
  // Single text keeps its first max_length - 2 tokens.
  CHECK(cased().encode(eight, std::nullopt, 4).input_ids == Ids{101, 170, 171, 102});
  CHECK(cased().encode(two, std::nullopt, 2).input_ids == Ids{101, 102});
  CHECK(cased().encode(two, std::nullopt, 100).input_ids == Ids{101, 170, 171, 102});
  // Too small for the special tokens, or negative: a clear error.
  CHECK_THROWS_AS(cased().encode(four, four, 2), shardtrain::Error);
  CHECK_THROWS_AS(cased().encode(four, std::nullopt, 1), shardtrain::Error);
  CHECK_THROWS_AS(cased().encode(four, std::nullopt, -1), shardtrain::Error);
  try {
    cased().encode(four, four, 2);
  } catch (const shardtrain::Error& e) {
    CHECK(std::string(e.what()).find("max_length 2") != std::string::npos);
  }
}

TEST_CASE("vocabulary files: CRLF, errors name the file") {
  TempDir dir;
  // The cased vocab with CRLF line ends gives the same ids.
  std::string crlf;
  for (const char c : read_file(kCasedVocab)) {
    if (c == '\n') crlf += '\r';
    crlf += c;
  }
  const Tokenizer from_crlf = Tokenizer::from_vocab_file(dir.write("crlf.txt", crlf), {});
  CHECK(from_crlf.vocab_size() == 28996);
  CHECK(tokens_of(from_crlf, "Hello, Café [SEP] world!") == tokens_of(cased(), "Hello, Café [SEP] world!"));
  CHECK(from_crlf.token(101) == "[CLS]");

  auto error_of = [](const std::string& path) {
    try {
      Tokenizer::from_vocab_file(path, {});
    } catch (const shardtrain::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string missing = (dir.path / "missing.txt").string();
  CHECK(error_of(missing).find(missing) != std::string::npos);
  const std::string empty = dir.write("empty.txt", "");
  CHECK(error_of(empty).find(empty) != std::string::npos);
  CHECK(error_of(empty).find("empty") != std::string::npos);
  const std::string no_unk = dir.write("no_unk.txt", "[PAD]\n[CLS]\n[SEP]\nhello\n");
  CHECK(error_of(no_unk).find(no_unk) != std::string::npos);
  CHECK(error_of(no_unk).find("[UNK]") != std::string::npos);
  const std::string no_pad = dir.write("no_pad.txt", "[UNK]\n[CLS]\n[SEP]\nhello\n");
  CHECK(error_of(no_pad).find("[PAD]") != std::string::npos);

  // A minimal vocab: ids are line indices, a repeated token resolves to its last line.
  const Tokenizer tiny = Tokenizer::from_vocab_file(
      dir.write("tiny.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n##s\nhello\nworld"), {});
  CHECK(tiny.vocab_size() == 8);
  CHECK(tiny.mask_id() == -1);
  CHECK(tiny.encode("hellos world", std::nullopt, 0).input_ids == Ids{2, 6, 5, 7, 3});
  CHECK(tokens_of(tiny, "[MASK]") == Ids{1, 1, 1});  // no mask token: "[" "MASK" "]" are unknown
}

TEST_CASE("model folder: tokenizer_config.json options") {
  TempDir dir;
  const std::string uncased_vocab = read_file(kUncasedVocab);
  const std::string cased_vocab = read_file(kCasedVocab);

  std::filesystem::create_directories(dir.path / "uncased");
  dir.write("uncased/vocab.txt", uncased_vocab);
  dir.write("uncased/tokenizer_config.json", R"({"do_lower_case": true, "model_max_length": 512})");
  const Tokenizer u = Tokenizer::from_model_dir((dir.path / "uncased").string());
  CHECK(u.options().lowercase);
  CHECK(u.options().strips_accents());
  CHECK(tokens_of(u, "Café") == Ids{7668});

  std::filesystem::create_directories(dir.path / "keep");
  dir.write("keep/vocab.txt", uncased_vocab);
  dir.write("keep/tokenizer_config.json", R"({"do_lower_case": true, "strip_accents": false})");
  const Tokenizer k = Tokenizer::from_model_dir((dir.path / "keep").string());
  CHECK(k.options().lowercase);
  CHECK(!k.options().strips_accents());

  std::filesystem::create_directories(dir.path / "cased");
  dir.write("cased/vocab.txt", cased_vocab);
  dir.write("cased/tokenizer_config.json",
            R"({"do_lower_case": false, "tokenize_chinese_chars": false, "sep_token": {"content": "[SEP]"}})");
  const Tokenizer c = Tokenizer::from_model_dir((dir.path / "cased").string() + "/");
  CHECK(!c.options().lowercase);
  CHECK(!c.options().tokenize_chinese_chars);
  CHECK(tokens_of(c, "中文") == Ids{980, 28923});

  // No tokenizer_config.json: the vocabulary decides (uppercase tokens -> cased).
  std::filesystem::create_directories(dir.path / "bare_cased");
  dir.write("bare_cased/vocab.txt", cased_vocab);
  CHECK(!Tokenizer::from_model_dir((dir.path / "bare_cased").string()).options().lowercase);
  std::filesystem::create_directories(dir.path / "bare_uncased");
  dir.write("bare_uncased/vocab.txt", uncased_vocab);
  CHECK(Tokenizer::from_model_dir((dir.path / "bare_uncased").string()).options().lowercase);

  // Errors name the file.
  std::filesystem::create_directories(dir.path / "broken");
  dir.write("broken/vocab.txt", cased_vocab);
  const std::string broken_config = dir.write("broken/tokenizer_config.json", R"({"do_lower_case": "yes"})");
  try {
    Tokenizer::from_model_dir((dir.path / "broken").string());
    CHECK_MESSAGE(false, "expected an error");
  } catch (const shardtrain::Error& e) {
    CHECK(std::string(e.what()).find(broken_config) != std::string::npos);
    CHECK(std::string(e.what()).find("do_lower_case") != std::string::npos);
  }
  dir.write("broken/tokenizer_config.json", "{not json");
  CHECK_THROWS_AS(Tokenizer::from_model_dir((dir.path / "broken").string()), shardtrain::Error);
  CHECK_THROWS_AS(Tokenizer::from_model_dir((dir.path / "nowhere").string()), shardtrain::Error);
}

TEST_CASE("copies share the vocabulary and moves are cheap") {
  Tokenizer copy = cased();
  CHECK(&copy.token(5) == &cased().token(5));
  Tokenizer moved = std::move(copy);
  CHECK(tokens_of(moved, "Hello") == Ids{8667});
}

TEST_CASE("tokenize appends; const methods are safe from several threads") {
  Ids ids{7};
  cased().tokenize("Hello", ids);
  cased().tokenize("world", ids);
  CHECK(ids == Ids{7, 8667, 1362});

  // Each thread encodes the same texts (they share the thread-local-buffer code
  // paths); results must equal the single-thread ones.
  const std::vector<std::string> texts{"Hello, Café [SEP] world!", "中文 İstanbul naïve", std::string(150, 'x'),
                                       "He said the foodservice pie business doesn't fit."};
  std::vector<Encoding> expected;
  for (const std::string& text : texts) expected.push_back(uncased().encode(text, std::string_view(text), 64));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int repeat = 0; repeat < 200; ++repeat) {
        for (std::size_t i = 0; i < texts.size(); ++i) {
          const Encoding e = uncased().encode(texts[i], std::string_view(texts[i]), 64);
          if (e.input_ids != expected[i].input_ids || e.token_type_ids != expected[i].token_type_ids) ++mismatches[t];
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK(mismatches == std::vector<int>(4, 0));
}
