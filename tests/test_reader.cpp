// Readers: GLUE TSV (MRPC itself), CSV quoting, JSON Lines, BOM/CRLF, column
// selection, label mapping, and every kind of bad row under both policies.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <string>

#include "shardtrain/core/check.h"
#include "shardtrain/data/reader.h"

using namespace shardtrain;

namespace {

const std::string kReaderFixtures = SHARDTRAIN_SOURCE_DIR "/tests/data/readers/";
const std::string kMrpc = SHARDTRAIN_SOURCE_DIR "/data/glue/MRPC/";

ReaderOptions mrpc_options() {
  ReaderOptions options;
  options.text_a = "#1 String";
  options.text_b = "#2 String";
  options.label = "Quality";
  return options;
}

// The message of the Error thrown by `fn` ("" if none).
template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("MRPC train/dev/test read with quoting off") {
  RawTable train = read_table(kMrpc + "train.tsv", mrpc_options());
  CHECK(train.size() == 3668);
  CHECK(train.num_bad_rows == 0);
  REQUIRE(train.labels.kind == LabelKind::kClass);
  CHECK(train.labels.names.empty());  // integers used as given
  CHECK(train.labels.num_classes() == 2);
  // First data row (line 2, after the BOM-prefixed header): quotes are plain text.
  CHECK(train.text_a[0] == "Amrozi accused his brother, whom he called \"the witness\", of deliberately "
                           "distorting his evidence.");
  CHECK(train.text_b[0] == "Referring to him as only \"the witness\", Amrozi accused his brother of "
                           "deliberately distorting his evidence.");
  CHECK(train.labels.class_ids[0] == 1);
  CHECK(train.labels.class_ids[1] == 0);
  CHECK(train.line_numbers[0] == 2);
  CHECK(train.line_numbers.back() == 3669);
  int64_t positives = 0;
  for (int64_t id : train.labels.class_ids) positives += id;
  CHECK(positives == 2474);  // GLUE MRPC train: 67.4% paraphrases

  RawTable dev = read_table(kMrpc + "dev.tsv", mrpc_options());
  CHECK(dev.size() == 408);
  CHECK(dev.text_a[0] == "He said the foodservice pie business doesn't fit the company's long-term growth "
                         "strategy.");
  // A lone opening quote that is never closed: with quoting on this would swallow rows.
  CHECK(dev.text_b[0] == "\"The foodservice pie business does not fit our long-term growth strategy.");
  int64_t dev_positives = 0;
  for (int64_t id : dev.labels.class_ids) dev_positives += id;
  CHECK(dev_positives == 279);

  // test.tsv has no label column: its first column is "index".
  ReaderOptions test_options = mrpc_options();
  test_options.label = "";
  RawTable test = read_table(kMrpc + "test.tsv", test_options);
  CHECK(test.size() == 1725);
  CHECK(test.labels.kind == LabelKind::kNone);
  CHECK(error_of([&] { read_table(kMrpc + "test.tsv", mrpc_options()); }).find("'Quality' is not a column") !=
        std::string::npos);
}

TEST_CASE("UTF-8 BOM and CRLF; columns by name and by index") {
  RawTable by_name = read_table(kReaderFixtures + "bom_crlf.tsv", mrpc_options());
  REQUIRE(by_name.size() == 2);
  CHECK(by_name.text_a[0] == "He said \"hi.");
  CHECK(by_name.text_b[0] == "She said \"bye\"");  // no trailing \r
  CHECK(by_name.labels.class_ids == std::vector<int64_t>{1, 0});

  ReaderOptions by_index;
  by_index.text_a = "3";
  by_index.text_b = "4";
  by_index.label = "0";  // the BOM is not part of the first header name either way
  RawTable indexed = read_table(kReaderFixtures + "bom_crlf.tsv", by_index);
  CHECK(indexed.text_a == by_name.text_a);
  CHECK(indexed.text_b == by_name.text_b);
  CHECK(indexed.labels.class_ids == by_name.labels.class_ids);

  by_index.text_a = "5";
  CHECK(error_of([&] { read_table(kReaderFixtures + "bom_crlf.tsv", by_index); })
            .find("data.text_a = 5 is out of range (the header has 5 columns)") != std::string::npos);
  CHECK(error_of([&] { read_table(kReaderFixtures + "missing.tsv", by_index); }) ==
        "data file = '" + kReaderFixtures + "missing.tsv': no such file");
}

TEST_CASE("format from extension or explicit") {
  CHECK(format_from_extension("a/b/train.TSV") == FileFormat::kTsv);
  CHECK(format_from_extension("x.csv") == FileFormat::kCsv);
  CHECK(format_from_extension("x.jsonl") == FileFormat::kJsonl);
  CHECK(format_from_extension("x.json") == FileFormat::kJsonl);
  CHECK_THROWS_AS(format_from_extension("x.txt"), Error);
  CHECK(parse_file_format("csv") == FileFormat::kCsv);
  CHECK_THROWS_AS(parse_file_format("parquet"), Error);
  CHECK(parse_bad_row_policy("skip") == BadRowPolicy::kSkip);
  CHECK_THROWS_AS(parse_bad_row_policy("ignore"), Error);

  // A .txt file read as TSV because the format is explicit.
  ReaderOptions options;
  options.format = FileFormat::kTsv;
  options.text_a = "s";
  RawTable t = read_table_from_string("s\nhello \"x\n", "notes.txt", options);
  REQUIRE(t.size() == 1);
  CHECK(t.text_a[0] == "hello \"x");
  CHECK(t.labels.kind == LabelKind::kNone);
  CHECK_FALSE(t.has_text_b);
}

TEST_CASE("CSV RFC 4180 quoting and string labels") {
  ReaderOptions options;
  options.text_a = "sentence";
  options.label = "label";
  RawTable t = read_table(kReaderFixtures + "quoting.csv", options);
  REQUIRE(t.size() == 4);
  CHECK(t.text_a[0] == "Hello, world");
  CHECK(t.text_a[1] == "She said \"yes\"");
  CHECK(t.text_a[2] == "two\nlines");
  CHECK(t.text_a[3] == "plain");
  CHECK(t.line_numbers == std::vector<int64_t>{2, 3, 4, 6});  // the quoted newline spans lines 4-5
  // Distinct strings in sorted order: neg=0, neutral=1, pos=2.
  CHECK(t.labels.names == std::vector<std::string>{"neg", "neutral", "pos"});
  CHECK(t.labels.class_ids == std::vector<int64_t>{2, 0, 2, 1});
  CHECK(t.labels.num_classes() == 3);

  // CRLF inside and outside quotes, empty fields, a quote inside an unquoted field.
  std::string crlf = "a,b,c\r\n\"x\",,\"y\"\"\"\r\n5 \"in\" 6,\"\",z\r\n";
  ReaderOptions o2;
  o2.text_a = "a";
  o2.text_b = "c";
  RawTable t2 = read_table_from_string(crlf, "crlf.csv", o2);
  REQUIRE(t2.size() == 2);
  CHECK(t2.text_a == std::vector<std::string>{"x", "5 \"in\" 6"});
  CHECK(t2.text_b == std::vector<std::string>{"y\"", "z"});

  // Reading an eval file with the training file's mapping.
  ReaderOptions fixed = options;
  fixed.label_names = {"neg", "neutral", "pos", "zzz"};
  RawTable t3 = read_table_from_string("sentence,label\nq,zzz\nr,neg\n", "dev.csv", fixed);
  CHECK(t3.labels.class_ids == std::vector<int64_t>{3, 0});
  CHECK(t3.labels.names == fixed.label_names);
  CHECK(error_of([&] { read_table_from_string("sentence,label\nq,maybe\n", "dev.csv", fixed); }) ==
        "dev.csv:2: label 'maybe' is not one of the training labels (neg, neutral, pos, zzz)");
}

TEST_CASE("label modes: integers as given, named, regression") {
  ReaderOptions options;
  options.text_a = "t";
  options.label = "y";
  const std::string ints = "t\ty\na\t2\nb\t0\nc\t2\n";
  RawTable auto_ints = read_table_from_string(ints, "x.tsv", options);
  CHECK(auto_ints.labels.class_ids == std::vector<int64_t>{2, 0, 2});
  CHECK(auto_ints.labels.names.empty());
  CHECK(auto_ints.labels.num_classes() == 3);

  options.label_mode = LabelMode::kNamed;
  RawTable named = read_table_from_string(ints, "x.tsv", options);
  CHECK(named.labels.names == std::vector<std::string>{"0", "2"});
  CHECK(named.labels.class_ids == std::vector<int64_t>{1, 0, 1});

  // Negative integers are not usable class ids: mapped as strings ("-1" < "1").
  options.label_mode = LabelMode::kAuto;
  RawTable signs = read_table_from_string("t\ty\na\t1\nb\t-1\n", "x.tsv", options);
  CHECK(signs.labels.names == std::vector<std::string>{"-1", "1"});
  CHECK(signs.labels.class_ids == std::vector<int64_t>{1, 0});

  options.label_mode = LabelMode::kRegression;
  RawTable reg = read_table_from_string("t\ty\na\t3.8\nb\t0\nc\t-1e-1\n", "stsb.tsv", options);
  REQUIRE(reg.labels.kind == LabelKind::kRegression);
  CHECK(reg.labels.values == std::vector<float>{3.8f, 0.0f, -0.1f});
  CHECK(error_of([&] { read_table_from_string("t\ty\na\t3.8\nb\thigh\n", "stsb.tsv", options); }) ==
        "stsb.tsv:3: label 'high' is not a number (regression labels must be floats)");
}

TEST_CASE("JSON Lines: keys, numeric and string labels, blank lines") {
  ReaderOptions options;
  options.text_a = "premise";
  options.text_b = "hypothesis";
  options.label = "label";
  RawTable t = read_table(kReaderFixtures + "pairs.jsonl", options);
  REQUIRE(t.size() == 3);
  CHECK(t.text_a == std::vector<std::string>{"A man.", "Rain.", "Sun."});
  CHECK(t.text_b == std::vector<std::string>{"A person.", "Wet.", "Dry."});
  CHECK(t.labels.class_ids == std::vector<int64_t>{2, 0, 1});
  CHECK(t.line_numbers == std::vector<int64_t>{1, 2, 4});

  ReaderOptions o2;
  o2.text_a = "s";
  o2.label = "y";
  RawTable strings = read_table_from_string("{\"s\":\"a\",\"y\":\"1\"}\r\n{\"s\":\"b\",\"y\":0}\r\n", "x.jsonl", o2);
  CHECK(strings.labels.class_ids == std::vector<int64_t>{1, 0});  // "1" and 0 are both integers
  o2.label_mode = LabelMode::kRegression;
  RawTable floats = read_table_from_string("{\"s\":\"a\",\"y\":0.25}\n{\"s\":\"b\",\"y\":\"2.5\"}\n", "x.jsonl", o2);
  CHECK(floats.labels.values == std::vector<float>{0.25f, 2.5f});
}

TEST_CASE("bad rows: error names file and line; skip counts") {
  ReaderOptions tsv;
  tsv.text_a = "sentence1";
  tsv.text_b = "sentence2";
  tsv.label = "label";
  const std::string bad_tsv = kReaderFixtures + "bad_columns.tsv";
  CHECK(error_of([&] { read_table(bad_tsv, tsv); }) == bad_tsv + ":3: expected 3 columns, found 2");
  tsv.on_bad_row = BadRowPolicy::kSkip;
  RawTable skipped = read_table(bad_tsv, tsv);
  CHECK(skipped.size() == 2);
  CHECK(skipped.num_bad_rows == 1);
  CHECK(skipped.text_a == std::vector<std::string>{"good one", "third"});
  CHECK(skipped.line_numbers == std::vector<int64_t>{2, 4});

  // Empty label, invalid UTF-8 in a TSV row.
  ReaderOptions t2;
  t2.text_a = "t";
  t2.label = "y";
  CHECK(error_of([&] { read_table_from_string("t\ty\na\t1\nb\t\n", "e.tsv", t2); }) == "e.tsv:3: empty label");
  CHECK(error_of([&] { read_table_from_string("t\ty\na\xc3\x28\t1\n", "u.tsv", t2); }) == "u.tsv:2: invalid UTF-8");

  // CSV: unmatched quote, text after a closing quote.
  ReaderOptions csv;
  csv.text_a = "a";
  CHECK(error_of([&] { read_table_from_string("a,b\n\"x\"y,1\n", "q.csv", csv); })
            .find("q.csv:2: unexpected text after a closing quote") == 0);
  CHECK(error_of([&] { read_table_from_string("a,b\n1,2\n\"open,3\n4,5\n", "q.csv", csv); })
            .find("q.csv:3: quoted field is never closed") == 0);
  csv.on_bad_row = BadRowPolicy::kSkip;
  RawTable csv_skip = read_table_from_string("a,b\n\"x\"y,1\n2,3\n", "q.csv", csv);
  CHECK(csv_skip.num_bad_rows == 1);
  CHECK(csv_skip.text_a == std::vector<std::string>{"2"});
  CHECK(csv_skip.line_numbers == std::vector<int64_t>{3});

  // JSONL: malformed JSON, missing field, invalid UTF-8; each under kError.
  ReaderOptions json;
  json.text_a = "text";
  json.label = "label";
  const std::string bad_json = kReaderFixtures + "bad.jsonl";
  CHECK(error_of([&] { read_table(bad_json, json); }).find(bad_json + ":2: malformed JSON") == 0);
  CHECK(error_of([&] { read_table_from_string("{\"label\": 0}\n", "m.jsonl", json); }) ==
        "m.jsonl:1: missing field 'text'");
  CHECK(error_of([&] { read_table_from_string("{\"text\": \"a\", \"label\": null}\n", "m.jsonl", json); }) ==
        "m.jsonl:1: missing field 'label'");
  CHECK(error_of([&] { read_table_from_string("{\"text\": \"a\xff\", \"label\": 0}\n", "m.jsonl", json); }) ==
        "m.jsonl:1: invalid UTF-8");
  CHECK(error_of([&] { read_table_from_string("[1, 2]\n", "m.jsonl", json); }) ==
        "m.jsonl:1: malformed JSON: expected an object per line");
  CHECK(error_of([&] { read_table_from_string("{\"text\": 5, \"label\": 0}\n", "m.jsonl", json); }) ==
        "m.jsonl:1: field 'text' is not a string");
  CHECK(error_of([&] { read_table_from_string("{\"text\": \"a\", \"label\": [1]}\n", "m.jsonl", json); }) ==
        "m.jsonl:1: label field 'label' is not a number or string");
  json.on_bad_row = BadRowPolicy::kSkip;
  RawTable json_skip = read_table(bad_json, json);
  CHECK(json_skip.num_bad_rows == 3);
  CHECK(json_skip.text_a == std::vector<std::string>{"ok", "fine"});
  CHECK(json_skip.line_numbers == std::vector<int64_t>{1, 5});
  CHECK(json_skip.labels.names == std::vector<std::string>{"1", "x1"});  // "x1" is not an integer
  CHECK(json_skip.labels.class_ids == std::vector<int64_t>{0, 1});

  // A table with no rows at all is a user error, not an empty dataset.
  CHECK(error_of([&] { read_table_from_string("", "empty.tsv", t2); }) == "empty.tsv: empty file (expected a header row)");
}

// Issue 37, item 13: what a file is, named before its rows are parsed.
TEST_CASE("not a data file: a device, UTF-16, CR-only line ends") {
  const ReaderOptions options = mrpc_options();
  // /dev/zero was read until memory ran out.
  CHECK(error_of([&] { read_table("/dev/zero", options); }) == "data file = '/dev/zero': is a device, not a file");
  CHECK(error_of([&] { read_table(kReaderFixtures, options); }).find("is a folder, not a file") != std::string::npos);
  // UTF-16 with and without a byte-order mark: raw bytes were printed as columns.
  const std::string utf16_le_bom("\xFF\xFEQ\0u\0a\0l\0\t\0a\0\n\0", 16);
  CHECK(error_of([&] { read_table_from_string(utf16_le_bom, "u16.tsv", options); }) ==
        "u16.tsv: not UTF-8 (UTF-16); convert it to UTF-8, e.g. iconv -f UTF-16 -t UTF-8 'u16.tsv' > out.tsv");
  const std::string utf16_no_bom("Q\0u\0a\0l\0\t\0a\0\n\0", 14);
  CHECK(error_of([&] { read_table_from_string(utf16_no_bom, "u16.tsv", options); }).find("not UTF-8 (UTF-16?)") != std::string::npos);
  // CR-only line ends: the header was the whole file.
  const std::string old_mac = "Quality\t#1 String\t#2 String\r1\ta\tb\r0\tc\td\r";
  CHECK(error_of([&] { read_table_from_string(old_mac, "mac.tsv", options); })
            .rfind("mac.tsv: lines end in CR alone (old Mac line ends)", 0) == 0);
  // CRLF is fine.
  CHECK(read_table_from_string("Quality\t#1 String\t#2 String\r\n1\ta\tb\r\n", "crlf.tsv", options).size() == 1);
}

TEST_CASE("UTF-8 validation") {
  auto ok = [](const std::string& s) { return is_valid_utf8(s.data(), s.size()); };
  CHECK(ok("plain ascii"));
  CHECK(ok("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));  // é € 😀
  CHECK_FALSE(ok("\xc3"));              // truncated
  CHECK_FALSE(ok("\xc0\xaf"));          // overlong '/'
  CHECK_FALSE(ok("\xe0\x80\xaf"));      // overlong 3-byte
  CHECK_FALSE(ok("\xed\xa0\x80"));      // surrogate U+D800
  CHECK_FALSE(ok("\xf4\x90\x80\x80"));  // U+110000
  CHECK_FALSE(ok("\x80"));              // lone continuation
}

TEST_CASE("JSON Lines: a number beyond double is a bad row, not an uncaught exception (found by fuzz_reader)") {
  // nlohmann::json throws out_of_range, not parse_error, for 1e400: it ended the program before.
  ReaderOptions options;
  options.text_a = "sentence1";
  options.label = "label";
  const std::string text = "{\"sentence1\": \"a\", \"label\": 1}\n{\"sentence1\": \"b\", \"label\": 1e400}\n";
  CHECK_THROWS_WITH_AS(read_table_from_string(text, "big.jsonl", options),
                       doctest::Contains("big.jsonl:2: malformed JSON"), Error);
  options.on_bad_row = BadRowPolicy::kSkip;
  const RawTable table = read_table_from_string(text, "big.jsonl", options);
  CHECK(table.size() == 1);
  CHECK(table.num_bad_rows == 1);
}
