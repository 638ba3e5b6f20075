// Splitting a tsv / csv file into records, and finding a column in its header
// (data/records.h).
#include "data/records.h"

#include <algorithm>
#include <cstdlib>

#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain::reader_detail {

std::string strip_cr(std::string s) {
  if (!s.empty() && s.back() == '\r') s.pop_back();
  return s;
}

std::vector<Record> split_tsv(const std::string& text) {
  std::vector<Record> records;
  for_each_line(text, [&](int64_t line, const std::string& row) {
    if (row.empty()) return;
    Record record;
    record.line = line;
    size_t start = 0;
    while (true) {
      size_t tab = row.find('\t', start);
      if (tab == std::string::npos) {
        record.fields.push_back(row.substr(start));
        break;
      }
      record.fields.push_back(row.substr(start, tab - start));
      start = tab + 1;
    }
    records.push_back(std::move(record));
  });
  return records;
}

std::vector<Record> split_csv(const std::string& text) {
  std::vector<Record> records;
  size_t pos = 0;
  const size_t n = text.size();
  int64_t line = 1;
  while (pos < n) {
    Record record;
    record.line = line;
    bool end_of_record = false;
    while (!end_of_record) {
      std::string field;
      if (pos < n && text[pos] == '"') {
        ++pos;
        bool closed = false;
        while (pos < n) {
          char c = text[pos];
          if (c == '"') {
            if (pos + 1 < n && text[pos + 1] == '"') {
              field.push_back('"');
              pos += 2;
              continue;
            }
            ++pos;
            closed = true;
            break;
          }
          if (c == '\n') ++line;
          field.push_back(c);
          ++pos;
        }
        if (!closed) {
          record.error = "quoted field is never closed (unmatched \")";
          pos = n;
          break;
        }
        if (pos < n && text[pos] == '\r' && (pos + 1 == n || text[pos + 1] == '\n')) ++pos;
        if (pos < n && text[pos] != ',' && text[pos] != '\n') {
          record.error = "unexpected text after a closing quote (a quote inside a quoted field must be doubled)";
          size_t nl = text.find('\n', pos);
          pos = nl == std::string::npos ? n : nl + 1;
          ++line;
          break;
        }
      } else {
        size_t end = text.find_first_of(",\n", pos);
        if (end == std::string::npos) end = n;
        field = text.substr(pos, end - pos);
        if (end == n || text[end] == '\n') field = strip_cr(std::move(field));
        pos = end;
      }
      record.fields.push_back(std::move(field));
      if (pos >= n) {
        end_of_record = true;
      } else if (text[pos] == ',') {
        ++pos;
      } else {  // '\n'
        ++pos;
        ++line;
        end_of_record = true;
      }
    }
    bool blank = !record.error && record.fields.size() == 1 && record.fields[0].empty();
    if (!blank) records.push_back(std::move(record));
  }
  return records;
}

bool is_all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

int resolve_column(const std::vector<std::string>& header, const std::string& spec, const char* key,
                   const std::string& path) {
  for (size_t i = 0; i < header.size(); ++i)
    if (header[i] == spec) return static_cast<int>(i);
  if (is_all_digits(spec)) {
    long index = std::strtol(spec.c_str(), nullptr, 10);
    if (index < static_cast<long>(header.size())) return static_cast<int>(index);
    throw Error(str_format("%s: %s = %ld is out of range (the header has %zu columns)", path.c_str(), key,
                           index, header.size()));
  }
  std::string names;
  for (const auto& h : header) names += (names.empty() ? "'" : ", '") + h + "'";
  throw Error(path + ": " + key + " = '" + shorten(spec, 100) + "' is not a column; the header has " + shorten(names, 400));
}

}  // namespace shardtrain::reader_detail
