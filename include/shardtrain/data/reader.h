// Readers for labelled text tables: GLUE TSV, CSV (RFC 4180) and JSON Lines.
//
// A reader turns one file into a RawTable: for every row the text_a string, the
// optional text_b string, the label, and the physical line the row starts on.
// Every rank reads the whole file (files are small next to the model), so the
// result, including the label mapping, is identical on every rank.
//
// Formats (ReaderOptions::format, or from the extension when kAuto):
//   tsv   (.tsv)          header row, tab separated, NO quote processing: a `"`
//                         is an ordinary character (GLUE MRPC has lone quotes;
//                         HF datasets reads GLUE with quoting off).
//   csv   (.csv)          header row, RFC 4180: quoted fields may hold commas,
//                         doubled quotes ("") and line breaks.
//   jsonl (.jsonl, .json) one JSON object per line, fields by key.
// A UTF-8 byte-order mark at the start of the file and CRLF line ends are
// accepted in every format. Blank lines are ignored.
//
// Columns (text_a, text_b, label) are given by header name / JSON key, or for
// tsv/csv by 0-based index ("3"). A name that matches a header cell wins over the
// index reading. text_b and label may be empty: single-sentence tasks and
// prediction files without labels.
//
// Labels (LabelMode):
//   kAuto        if every label is an integer ("0", "1", JSON 1) the integers are
//                the class ids as given (MRPC 0/1) and label_names stays empty;
//                otherwise the distinct strings, sorted, become class ids
//                0..K-1 and label_names[id] is the string.
//   kNamed       always map strings to ids in sorted order (even "0"/"1").
//   kRegression  labels are floats (JSON numbers or strings like "3.8").
// To read an eval file with the training file's mapping, pass the training
// table's label_names as ReaderOptions::label_names: labels are then looked up
// in it, and a label not in it is a bad row.
//
// A label set must be consistent (kAuto): all integers, or all names. One
// stray "abc" or "1.5" among integers (or "7" among names) is a bad row, found
// by its line: the kind of the fewer rows is the stray one. Integer labels are
// also checked against ReaderOptions::num_classes:
//   0              as given (any ids below kMaxNumLabels; prediction files)
//   kInferClasses  the classes are inferred from this file (training data with
//                  model.num_labels = 0): the ids must be exactly 0..K-1, each
//                  used, so one stray "7" in a binary file is a bad row and not
//                  an 8-class model. Rows whose id is at or above the smallest
//                  unused one are the stray ones.
//   n > 0          every id must be below n (model.num_labels; or an eval
//                  file, with the training data's class count: eval labels
//                  never add classes). class_source names where n comes from.
//
// Bad rows (wrong number of columns, missing field, unparsable label, invalid
// UTF-8, malformed JSON or CSV quoting): with BadRowPolicy::kError the reader
// throws shardtrain::Error("train.tsv:57: expected 5 columns, found 4"); with
// kSkip it drops the row and counts it in RawTable::num_bad_rows (the caller
// logs the count).
//
//   ReaderOptions options;
//   options.text_a = "#1 String"; options.text_b = "#2 String"; options.label = "Quality";
//   RawTable train = read_table("data/glue/MRPC/train.tsv", options);   // 3668 rows
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardtrain/core/enum_names.h"  // FileFormat, BadRowPolicy

namespace shardtrain {

enum class LabelMode { kAuto, kNamed, kRegression };
// What a table's labels are: none (prediction file), class ids, or floats.
enum class LabelKind { kNone, kClass, kRegression };

// "tsv" / "csv" / "jsonl" / "auto" (or ""); anything else throws Error.
FileFormat parse_file_format(const std::string& name);
// The format for `path` from its extension (.tsv .csv .jsonl .json); throws
// Error naming the file when the extension is none of them.
FileFormat format_from_extension(const std::string& path);
// "error" / "skip"; anything else throws Error.
BadRowPolicy parse_bad_row_policy(const std::string& name);

struct ReaderOptions {
  FileFormat format = FileFormat::kAuto;
  std::string text_a;  // required
  std::string text_b;  // "" = single-text task
  std::string label;   // "" = no labels
  LabelMode label_mode = LabelMode::kAuto;
  BadRowPolicy on_bad_row = BadRowPolicy::kError;
  // Fixed class mapping (a training table's label_names); empty = derive it.
  std::vector<std::string> label_names;
  // Integer class ids allowed (see the top of this file): 0, kInferClasses or n > 0.
  int64_t num_classes = 0;
  // Where num_classes > 0 comes from, for messages ("model.num_labels",
  // "the training data (train.tsv)").
  std::string class_source = "model.num_labels";
};

// ReaderOptions::num_classes for training data whose classes are inferred.
inline constexpr int64_t kInferClasses = -1;

// Per-row labels in one of the LabelKinds; the unused vector stays empty.
struct Labels {
  LabelKind kind = LabelKind::kNone;
  std::vector<int64_t> class_ids;  // kClass: one per row
  std::vector<float> values;       // kRegression: one per row
  // kClass with string labels: label_names[id]. Empty when integer labels are
  // used as given (then the ids are the labels).
  std::vector<std::string> names;

  // kClass: names.size() when named, else max id + 1 (0 for no rows);
  // kRegression: 1; kNone: 0.
  int64_t num_classes() const;
};

struct RawTable {
  std::string path;
  std::vector<std::string> text_a;
  std::vector<std::string> text_b;     // one per row when has_text_b, else empty
  std::vector<int64_t> line_numbers;   // 1-based line where each row starts
  Labels labels;
  int64_t num_bad_rows = 0;            // rows skipped under BadRowPolicy::kSkip

  int64_t size() const { return static_cast<int64_t>(text_a.size()); }
  bool has_text_b = false;             // a text_b column was requested
};

// Reads `path` with `options`. Throws Error for a missing/unreadable file, an
// unknown column, and (policy kError) the first bad row.
RawTable read_table(const std::string& path, const ReaderOptions& options);

// The same from bytes already in memory; `path` only names the source in
// messages and picks the format when options.format is kAuto.
RawTable read_table_from_string(const std::string& content, const std::string& path,
                                const ReaderOptions& options);

// ---- Fields of any layout (the token-classification and multiple-choice
// readers, data/word_table.h and data/multiple_choice.h, build on these) -------

// One field of a row: a text, or a list of texts (a JSON array, in JSON Lines
// natively, in a tsv / csv cell as JSON text; numbers in it become their text).
struct FieldValue {
  bool is_list = false;
  std::string text;               // !is_list
  std::vector<std::string> list;  // is_list
};

// A column to read: `column` (header name / JSON key, or a 0-based index for
// tsv / csv), named in messages by `key` (the config key that chose it).
struct FieldSpec {
  std::string key;
  std::string column;
};

struct FieldRows {
  std::string path;
  std::vector<int64_t> line_numbers;          // per row
  std::vector<std::vector<FieldValue>> rows;  // per row, one per FieldSpec in order
  int64_t num_bad_rows = 0;
};

// Reads every row's `fields` from a tsv, csv or jsonl file held in `content`
// (`path` names it). A missing field, a row of the wrong width, invalid UTF-8
// or malformed JSON is a bad row (policy: throw "file:line: ..." or count and
// skip); an unknown column throws naming its key.
FieldRows read_fields(const std::string& content, const std::string& path, FileFormat format,
                      const std::vector<FieldSpec>& fields, BadRowPolicy on_bad_row);

// True when the tsv / csv / jsonl file at `path` (format kAuto: from the
// extension) has the column `column`: a header name or 0-based index (tsv,
// csv), or a key of its first JSON object (jsonl). For a setting that is a
// default rather than asked for (predict's label column from the run):
// present, it is read; absent, it is not. Errors as read_table for a file
// that cannot be read or has no header.
bool file_has_column(const std::string& path, FileFormat format, const std::string& column);

// The whole file at `path` (a regular file; Error naming it otherwise), a
// UTF-8 byte-order mark removed.
std::string read_data_file(const std::string& path);

// True when `text` is well-formed UTF-8 (no overlong forms, surrogates or
// code points above U+10FFFF).
bool is_valid_utf8(const char* data, size_t size);

}  // namespace shardtrain
