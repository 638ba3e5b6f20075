// Private to the data layer: a tsv / csv / jsonl file as records, what the
// field reader (reader.cpp) and the labelled-table reader (label_table.cpp)
// share. Format rules: include/shardtrain/data/reader.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace shardtrain::reader_detail {

// One physical record of a delimited file, split into fields.
struct Record {
  int64_t line = 0;
  std::vector<std::string> fields;
  std::optional<std::string> error;  // malformed quoting
};

// `s` without a trailing CR.
std::string strip_cr(std::string s);

// Calls visit(line, row) for each line of `text`: 1-based line numbers, the
// trailing CR of CRLF files removed.
template <class Visit>
void for_each_line(const std::string& text, Visit&& visit) {
  size_t pos = 0;
  int64_t line = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    ++line;
    visit(line, strip_cr(text.substr(pos, end - pos)));
    pos = end + 1;
  }
}

// GLUE TSV: one record per line, fields split on tabs, quotes are ordinary text.
std::vector<Record> split_tsv(const std::string& text);
// RFC 4180 CSV. A quote inside an unquoted field is kept as text (as Python's
// csv module does); text after a closing quote, or a quote never closed, makes
// the record malformed, and parsing resumes at the next line.
std::vector<Record> split_csv(const std::string& text);

bool is_all_digits(const std::string& s);

// Resolves a column option against the header: exact name first, then index.
int resolve_column(const std::vector<std::string>& header, const std::string& spec, const char* key,
                   const std::string& path);

}  // namespace shardtrain::reader_detail
