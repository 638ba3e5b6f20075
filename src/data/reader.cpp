// The generic layer of the data readers (data/reader.h): format names, UTF-8
// checks, and fields of any layout from tsv, csv and jsonl rows.
#include "shardtrain/data/reader.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "data/records.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain {

using namespace reader_detail;

FileFormat parse_file_format(const std::string& name) {
  if (name.empty() || name == "auto") return FileFormat::kAuto;
  if (name == "tsv") return FileFormat::kTsv;
  if (name == "csv") return FileFormat::kCsv;
  if (name == "jsonl" || name == "json") return FileFormat::kJsonl;
  if (name == "conll") return FileFormat::kConll;
  throw Error("data.format: unknown format '" + name + "' (expected tsv, csv or jsonl)");
}

FileFormat format_from_extension(const std::string& path) {
  auto dot = path.find_last_of('.');
  std::string ext = dot == std::string::npos ? "" : path.substr(dot + 1);
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  if (ext == "tsv") return FileFormat::kTsv;
  if (ext == "csv") return FileFormat::kCsv;
  if (ext == "jsonl" || ext == "json") return FileFormat::kJsonl;
  if (ext == "conll") return FileFormat::kConll;
  throw Error(path + ": cannot tell the format from the extension; set data.format to tsv, csv or jsonl");
}

BadRowPolicy parse_bad_row_policy(const std::string& name) {
  if (name == "error") return BadRowPolicy::kError;
  if (name == "skip") return BadRowPolicy::kSkip;
  throw Error("data.on_bad_row: unknown policy '" + name + "' (expected error or skip)");
}

bool is_valid_utf8(const char* data, size_t size) {
  const auto* s = reinterpret_cast<const unsigned char*>(data);
  size_t i = 0;
  while (i < size) {
    unsigned char c = s[i];
    if (c < 0x80) { ++i; continue; }
    int extra;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) { extra = 1; cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { extra = 2; cp = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { extra = 3; cp = c & 0x07; }
    else return false;  // continuation byte first, C0/C1 overlong leads, F5+
    if (i + extra >= size) return false;
    for (int k = 1; k <= extra; ++k) {
      unsigned char cc = s[i + k];
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong 3/4-byte forms, UTF-16 surrogates, beyond U+10FFFF.
    if (extra == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) return false;
    if (extra == 3 && (cp < 0x10000 || cp > 0x10FFFF)) return false;
    i += extra + 1;
  }
  return true;
}

namespace {

// A cell of tsv / csv: a JSON array of strings or numbers is a list, anything
// else its text.
FieldValue cell_value(const std::string& cell) {
  FieldValue value;
  value.text = cell;
  if (cell.empty() || cell.front() != '[') return value;
  try {
    const nlohmann::json parsed = nlohmann::json::parse(cell);
    if (!parsed.is_array()) return value;
    FieldValue list;
    list.is_list = true;
    for (const auto& item : parsed) {
      if (item.is_string()) list.list.push_back(item.get<std::string>());
      else if (item.is_number_integer()) list.list.push_back(std::to_string(item.get<int64_t>()));
      else return value;
    }
    return list;
  } catch (const nlohmann::json::exception&) {
    return value;
  }
}

// A JSON value as a field; nullopt (with `problem` set) when it is neither a
// text, a number, nor an array of them.
std::optional<FieldValue> json_value(const nlohmann::json& item, const std::string& key, std::string* problem) {
  FieldValue value;
  if (item.is_string()) {
    value.text = item.get<std::string>();
  } else if (item.is_number_integer()) {
    value.text = std::to_string(item.get<int64_t>());
  } else if (item.is_number()) {
    value.text = item.dump();
  } else if (item.is_boolean()) {
    value.text = item.get<bool>() ? "true" : "false";
  } else if (item.is_array()) {
    value.is_list = true;
    for (const auto& element : item) {
      if (element.is_string()) value.list.push_back(element.get<std::string>());
      else if (element.is_number_integer()) value.list.push_back(std::to_string(element.get<int64_t>()));
      else {
        *problem = "field '" + key + "' holds an item that is neither a string nor an integer";
        return std::nullopt;
      }
    }
  } else {
    *problem = "field '" + key + "' is not a string, a number or a list";
    return std::nullopt;
  }
  return value;
}

}  // namespace

FieldRows read_fields(const std::string& content, const std::string& path, FileFormat format,
                      const std::vector<FieldSpec>& fields, BadRowPolicy on_bad_row) {
  FieldRows out;
  out.path = path;
  auto bad_row = [&](int64_t line, const std::string& what) {
    if (on_bad_row == BadRowPolicy::kError)
      throw Error(str_format("%s:%lld: %s", path.c_str(), static_cast<long long>(line), shorten(what, 400).c_str()));
    ++out.num_bad_rows;
  };
  std::string text = content;
  if (text.size() >= 3 && text.compare(0, 3, "\xEF\xBB\xBF") == 0) text.erase(0, 3);
  if (format == FileFormat::kAuto) format = format_from_extension(path);
  if (format == FileFormat::kTsv || format == FileFormat::kCsv) {
    const std::vector<Record> records = format == FileFormat::kTsv ? split_tsv(text) : split_csv(text);
    if (records.empty()) throw Error(path + ": empty file (expected a header row)");
    const Record& header = records[0];
    if (header.error)
      throw Error(str_format("%s:%lld: header: %s", path.c_str(), (long long)header.line, header.error->c_str()));
    std::vector<int> columns;
    for (const FieldSpec& f : fields) columns.push_back(resolve_column(header.fields, f.column, f.key.c_str(), path));
    for (size_t r = 1; r < records.size(); ++r) {
      const Record& rec = records[r];
      if (rec.error) { bad_row(rec.line, *rec.error); continue; }
      if (rec.fields.size() != header.fields.size()) {
        bad_row(rec.line, str_format("expected %zu columns, found %zu", header.fields.size(), rec.fields.size()));
        continue;
      }
      bool utf8_ok = true;
      for (const auto& cell : rec.fields) utf8_ok = utf8_ok && is_valid_utf8(cell.data(), cell.size());
      if (!utf8_ok) { bad_row(rec.line, "invalid UTF-8"); continue; }
      std::vector<FieldValue> row;
      for (int column : columns) row.push_back(cell_value(rec.fields[static_cast<size_t>(column)]));
      out.line_numbers.push_back(rec.line);
      out.rows.push_back(std::move(row));
    }
    return out;
  }
  if (format != FileFormat::kJsonl)
    throw Error(path + ": this reader takes tsv, csv or jsonl (data.format = \"" + enum_name(format) + "\")");
  for_each_line(text, [&](int64_t line, const std::string& row_text) {
    if (std::all_of(row_text.begin(), row_text.end(), [](unsigned char c) { return std::isspace(c); })) return;
    if (!is_valid_utf8(row_text.data(), row_text.size())) { bad_row(line, "invalid UTF-8"); return; }
    nlohmann::json object;
    try {
      object = nlohmann::json::parse(row_text);
    } catch (const nlohmann::json::exception& e) {
      bad_row(line, std::string("malformed JSON: ") + e.what());
      return;
    }
    if (!object.is_object()) { bad_row(line, "malformed JSON: expected an object per line"); return; }
    std::vector<FieldValue> row;
    for (const FieldSpec& f : fields) {
      auto it = object.find(f.column);
      if (it == object.end() || it->is_null()) {
        bad_row(line, "missing field '" + f.column + "' (" + f.key + ")");
        return;
      }
      std::string problem;
      std::optional<FieldValue> value = json_value(*it, f.column, &problem);
      if (!value) { bad_row(line, problem); return; }
      row.push_back(std::move(*value));
    }
    out.line_numbers.push_back(line);
    out.rows.push_back(std::move(row));
  });
  return out;
}

bool file_has_column(const std::string& path, FileFormat format, const std::string& column) {
  if (format == FileFormat::kAuto) format = format_from_extension(path);
  const std::string text = read_data_file(path);
  if (format == FileFormat::kTsv || format == FileFormat::kCsv) {
    const std::vector<Record> records = format == FileFormat::kTsv ? split_tsv(text) : split_csv(text);
    if (records.empty() || records[0].error) return false;
    const std::vector<std::string>& header = records[0].fields;
    if (std::find(header.begin(), header.end(), column) != header.end()) return true;
    return is_all_digits(column) && std::strtol(column.c_str(), nullptr, 10) < static_cast<long>(header.size());
  }
  bool found = false, seen = false;
  for_each_line(text, [&](int64_t, const std::string& row) {
    if (seen || std::all_of(row.begin(), row.end(), [](unsigned char c) { return std::isspace(c); })) return;
    seen = true;
    const nlohmann::json object = nlohmann::json::parse(row, nullptr, /*allow_exceptions=*/false);
    found = object.is_object() && object.contains(column) && !object[column].is_null();
  });
  return found;
}

std::string read_data_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open data file");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw Error(path + ": read error");
  std::string text = buffer.str();
  if (text.size() >= 3 && text.compare(0, 3, "\xEF\xBB\xBF") == 0) text.erase(0, 3);
  return text;
}

}  // namespace shardtrain
