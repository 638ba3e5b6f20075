// Extractive question-answering data (model.task = "question_answering"), in
// either layout run_qa.py meets:
//   - SQuAD JSON: {"data": [{"title", "paragraphs": [{"context", "qas": [{"id",
//     "question", "answers": [{"text", "answer_start"}], "is_impossible"}]}]}]}
//     (v1.1 and v2.0; "plausible_answers" of v2 are not answers);
//   - the flattened JSON Lines HF datasets writes, one question a line:
//     {"id", "title", "context", "question", "answers": {"text": [...],
//     "answer_start": [...]}}.
// The file's content decides: one JSON object with a "data" array is SQuAD
// JSON, anything else is read line by line.
//
// answer_start counts Unicode code points (Python's str indices), as do all
// character positions here. Refused, naming the file and the question id: an
// empty context; an id seen before; an answer_start that does not point at
// its answer text; an answer in a question marked impossible; and, unless
// `allow_unanswered` (SQuAD v2, or prediction), a question without answers.
//
//   QaTable table = read_qa_table("dev-v1.1.json", {});
//   table.examples[0].answer_starts[0]   // in characters of table.examples[0].context
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shardtrain {

struct QaExample {
  std::string id;
  std::string question;
  std::string context;
  std::vector<std::string> answer_texts;  // gold answers (several in dev sets); empty: none
  std::vector<int64_t> answer_starts;     // in characters of context, parallel to answer_texts
};

struct QaTable {
  std::string path;
  std::vector<QaExample> examples;  // in file order
  std::vector<int64_t> line_numbers;  // per example: its line (SQuAD JSON: 1-based question number)
  bool squad_json = false;            // the file's layout
  int64_t num_bad_rows = 0;           // always 0: a bad question is an error (no skipping)
  int64_t num_without_answers_field = 0;  // QaReadOptions::answers_if_present: questions with no "answers"

  int64_t size() const { return static_cast<int64_t>(examples.size()); }
};

struct QaReadOptions {
  // SQuAD v2 (data.version_2_with_negative), or data without answers
  // (predict): questions with no answer are allowed.
  bool allow_unanswered = false;
  // predict: the answers are not read (and need not be there).
  bool read_answers = true;
  // predict on a checkpoint: the answers are read where a question has them
  // (a question without an "answers" field has none, counted in
  // QaTable::num_without_answers_field); with read_answers only.
  bool answers_if_present = false;
};

QaTable read_qa_table(const std::string& path, const QaReadOptions& options);
QaTable read_qa_table_from_string(const std::string& content, const std::string& path, const QaReadOptions& options);

// Character (code point) count of UTF-8 text.
int64_t utf8_char_count(std::string_view text);
// The byte offset of each character of UTF-8 `text`, and text.size() last:
// char_starts(text)[c] is where character c begins.
std::vector<int32_t> utf8_char_starts(std::string_view text);
// The code point at text[*i] (U+FFFD for an invalid byte), advancing *i past it.
int32_t next_code_point(std::string_view text, size_t* i);
// Python's str.isspace() for one code point (what str.split() and lstrip() cut).
bool is_python_space(int32_t code_point);
// The characters [begin, end) of `text` (clamped to its length).
std::string utf8_substr(std::string_view text, int64_t begin, int64_t end);

}  // namespace shardtrain
