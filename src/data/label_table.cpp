// Labelled text tables (data/reader.h's read_table): the text_a / text_b /
// label columns of a tsv, csv or jsonl file, the bad-row policy, and the label
// rules (integer ids or names, regression values, a fixed mapping).
#include "shardtrain/data/reader.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "data/records.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"
#include "shardtrain/core/limits.h"
#include "shardtrain/core/log.h"

namespace shardtrain {

using namespace reader_detail;

int64_t Labels::num_classes() const {
  switch (kind) {
    case LabelKind::kNone: return 0;
    case LabelKind::kRegression: return 1;
    case LabelKind::kClass:
      if (!names.empty()) return static_cast<int64_t>(names.size());
      return class_ids.empty() ? 0 : *std::max_element(class_ids.begin(), class_ids.end()) + 1;
  }
  return 0;
}

namespace {

std::optional<int64_t> parse_int(const std::string& s) {
  if (s.empty() || s.size() > 19) return std::nullopt;
  size_t i = (s[0] == '-' || s[0] == '+') ? 1 : 0;
  if (i == s.size()) return std::nullopt;
  for (size_t k = i; k < s.size(); ++k)
    if (!std::isdigit(static_cast<unsigned char>(s[k]))) return std::nullopt;
  return std::strtoll(s.c_str(), nullptr, 10);
}

std::optional<float> parse_float(const std::string& s) {
  if (s.empty() || std::isspace(static_cast<unsigned char>(s[0]))) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || errno == ERANGE || !std::isfinite(v)) return std::nullopt;
  return static_cast<float>(v);
}

// Collects rows, applies the bad-row policy, then resolves labels.
class TableBuilder {
 public:
  TableBuilder(const std::string& path, const ReaderOptions& options) : options_(options) {
    table_.path = path;
    table_.has_text_b = !options.text_b.empty();
    has_label_ = !options.label.empty();
    for (size_t i = 0; i < options.label_names.size(); ++i)
      fixed_names_.emplace(options.label_names[i], static_cast<int64_t>(i));
  }

  bool has_label() const { return has_label_; }

  // Throws (kError) or counts (kSkip) a bad row.
  void bad_row(int64_t line, const std::string& what) {
    // A row can be a megabyte: whatever of it the message quotes is cut.
    if (options_.on_bad_row == BadRowPolicy::kError)
      throw Error(str_format("%s:%lld: %s", table_.path.c_str(), static_cast<long long>(line), shorten(what, 400).c_str()));
    ++table_.num_bad_rows;
  }

  // Validates the label of one row; returns the problem, if any, so that the row
  // is rejected before anything of it is stored.
  std::optional<std::string> check_label(const std::string& label, float* value, int64_t* fixed_id) const {
    if (options_.label_mode == LabelMode::kRegression) {
      auto v = parse_float(label);
      if (!v) return "label '" + shorten(label, 60) + "' is not a number (regression labels must be floats)";
      *value = *v;
      return std::nullopt;
    }
    if (label.empty()) return std::string("empty label");
    if (!fixed_names_.empty()) {
      auto it = fixed_names_.find(label);
      if (it == fixed_names_.end()) {
        std::string known;
        for (const auto& name : options_.label_names) known += (known.empty() ? "" : ", ") + name;
        return "label '" + shorten(label, 60) + "' is not one of the training labels (" + shorten(known) + ")";
      }
      *fixed_id = it->second;
    }
    return std::nullopt;
  }

  void add(int64_t line, std::string a, std::optional<std::string> b, const std::string& label) {
    float value = 0.0f;
    int64_t fixed_id = -1;
    if (has_label_) {
      if (auto problem = check_label(label, &value, &fixed_id)) {
        bad_row(line, *problem);
        return;
      }
    }
    table_.text_a.push_back(std::move(a));
    if (table_.has_text_b) table_.text_b.push_back(b ? std::move(*b) : std::string());
    table_.line_numbers.push_back(line);
    if (!has_label_) return;
    if (options_.label_mode == LabelMode::kRegression) values_.push_back(value);
    else if (fixed_id >= 0) ids_.push_back(fixed_id);
    else raw_labels_.push_back(label);
  }

  static bool is_integer(const std::string& label) { return parse_int(label).has_value(); }
  static bool is_negative(const std::string& label) {
    const auto v = parse_int(label);
    return v && *v < 0;
  }

  // Rows whose label is of the other kind than most (an integer among names,
  // a name or "1.5" among integers) are bad rows. With as many of each kind
  // there is no stray one: the labels are names.
  void drop_stray_kinds() {
    int64_t num_ints = 0;
    for (const auto& s : raw_labels_) num_ints += is_integer(s);
    const int64_t num_names = static_cast<int64_t>(raw_labels_.size()) - num_ints;
    if (num_ints == 0 || num_names == 0 || num_ints == num_names) return;
    const bool ints_stray = num_ints < num_names;
    const std::string kind = ints_stray ? "names" : "integers (class ids)";
    std::vector<bool> keep(raw_labels_.size(), true);
    for (size_t i = 0; i < raw_labels_.size(); ++i) {
      if (is_integer(raw_labels_[i]) != ints_stray) continue;
      bad_row(table_.line_numbers[i],
              str_format("label '%s' is %s, but %lld of the %zu labels are %s; every label must be of one kind",
                         shorten(raw_labels_[i], 60).c_str(), ints_stray ? "an integer" : "not an integer",
                         static_cast<long long>(ints_stray ? num_names : num_ints), raw_labels_.size(), kind.c_str()));
      keep[i] = false;
    }
    drop_rows(keep);
  }

  // Integer class ids against ReaderOptions::num_classes (see reader.h).
  void check_class_ids(std::vector<int64_t>& ids) {
    const int64_t n = options_.num_classes;
    std::vector<int64_t> distinct(ids);
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    // Rows with an id outside [0, limit) are stray; no id reaches kMaxNumLabels
    // (a label value of 1e9 is a mistake, not a billion-class model).
    int64_t limit = kMaxNumLabels;
    if (n > 0) {
      limit = n;
    } else if (n == kInferClasses) {
      limit = 0;  // the smallest id no row has
      for (int64_t id : distinct)
        if (id == limit) ++limit;
    }
    std::string found;
    for (size_t k = 0; k < distinct.size() && k < 12; ++k) found += (k ? ", " : "") + std::to_string(distinct[k]);
    if (distinct.size() > 12) found += ", ...";
    std::vector<bool> keep(ids.size(), true);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < limit) continue;
      std::string why;
      if (n > 0)
        why = str_format("label %lld is outside the %lld classes of %s (0..%lld)", static_cast<long long>(ids[i]),
                         static_cast<long long>(n), options_.class_source.c_str(), static_cast<long long>(n - 1));
      else if (limit == kMaxNumLabels)
        why = str_format("label %lld: class ids must be below %lld (the most labels a classifier may have)",
                         static_cast<long long>(ids[i]), static_cast<long long>(kMaxNumLabels));
      else
        why = str_format("label %lld: integer labels are the class ids 0..K-1, each used by some row, but no row has "
                         "label %lld (labels found: %s); fix the row, or set model.num_labels",
                         static_cast<long long>(ids[i]), static_cast<long long>(limit), found.c_str());
      bad_row(table_.line_numbers[i], why);
      keep[i] = false;
    }
    if (std::find(keep.begin(), keep.end(), false) == keep.end()) return;
    std::vector<int64_t> kept;
    for (size_t i = 0; i < ids.size(); ++i)
      if (keep[i]) kept.push_back(ids[i]);
    ids = std::move(kept);
    drop_rows(keep);
  }

  // Removes the rows (and their raw labels) with keep[i] false.
  void drop_rows(const std::vector<bool>& keep) {
    size_t out = 0;
    for (size_t i = 0; i < keep.size(); ++i) {
      if (!keep[i]) continue;
      if (out != i) {  // a string moved onto itself would be left empty
        table_.text_a[out] = std::move(table_.text_a[i]);
        if (table_.has_text_b) table_.text_b[out] = std::move(table_.text_b[i]);
        table_.line_numbers[out] = table_.line_numbers[i];
        raw_labels_[out] = std::move(raw_labels_[i]);
      }
      ++out;
    }
    table_.text_a.resize(out);
    if (table_.has_text_b) table_.text_b.resize(out);
    table_.line_numbers.resize(out);
    raw_labels_.resize(out);
  }

  RawTable finish() {
    Labels& labels = table_.labels;
    if (!has_label_) {
      labels.kind = LabelKind::kNone;
    } else if (options_.label_mode == LabelMode::kRegression) {
      labels.kind = LabelKind::kRegression;
      labels.values = std::move(values_);
    } else if (!fixed_names_.empty()) {
      labels.kind = LabelKind::kClass;
      labels.class_ids = std::move(ids_);
      labels.names = options_.label_names;
    } else {
      labels.kind = LabelKind::kClass;
      bool all_ints = false;
      std::vector<int64_t> ints;
      if (options_.label_mode == LabelMode::kAuto) {
        drop_stray_kinds();
        // Negative integers are no class ids: such a set ("-1" / "1") is names, as it always was.
        all_ints = std::all_of(raw_labels_.begin(), raw_labels_.end(), is_integer) &&
                   std::none_of(raw_labels_.begin(), raw_labels_.end(), is_negative);
      }
      if (all_ints) {
        for (const auto& s : raw_labels_) ints.push_back(*parse_int(s));
        check_class_ids(ints);
        labels.class_ids = std::move(ints);
      } else {
        std::vector<std::string> names = raw_labels_;
        std::sort(names.begin(), names.end());
        names.erase(std::unique(names.begin(), names.end()), names.end());
        labels.class_ids.reserve(raw_labels_.size());
        for (const auto& s : raw_labels_)
          labels.class_ids.push_back(std::lower_bound(names.begin(), names.end(), s) - names.begin());
        labels.names = std::move(names);
      }
    }
    return std::move(table_);
  }

 private:
  const ReaderOptions& options_;
  RawTable table_;
  bool has_label_ = false;
  std::map<std::string, int64_t> fixed_names_;
  std::vector<std::string> raw_labels_;
  std::vector<int64_t> ids_;
  std::vector<float> values_;
};

void read_delimited(const std::vector<Record>& records, const std::string& path, const ReaderOptions& options,
                    TableBuilder& builder) {
  if (records.empty()) throw Error(path + ": empty file (expected a header row)");
  const Record& header = records[0];
  if (header.error) throw Error(str_format("%s:%lld: header: %s", path.c_str(), (long long)header.line,
                                           header.error->c_str()));
  const size_t num_columns = header.fields.size();
  const int col_a = resolve_column(header.fields, options.text_a, "data.text_a", path);
  const int col_b = options.text_b.empty() ? -1 : resolve_column(header.fields, options.text_b, "data.text_b", path);
  const int col_label = options.label.empty() ? -1 : resolve_column(header.fields, options.label, "data.label", path);
  for (size_t r = 1; r < records.size(); ++r) {
    const Record& rec = records[r];
    if (rec.error) { builder.bad_row(rec.line, *rec.error); continue; }
    if (rec.fields.size() != num_columns) {
      builder.bad_row(rec.line, str_format("expected %zu columns, found %zu", num_columns, rec.fields.size()));
      continue;
    }
    bool utf8_ok = true;
    for (const auto& f : rec.fields) utf8_ok = utf8_ok && is_valid_utf8(f.data(), f.size());
    if (!utf8_ok) { builder.bad_row(rec.line, "invalid UTF-8"); continue; }
    std::optional<std::string> b;
    if (col_b >= 0) b = rec.fields[col_b];
    builder.add(rec.line, rec.fields[col_a], std::move(b), col_label >= 0 ? rec.fields[col_label] : std::string());
  }
}

void read_jsonl(const std::string& text, const std::string& path, const ReaderOptions& options,
                TableBuilder& builder) {
  for (const auto* key : {&options.text_a, &options.text_b, &options.label})
    if (is_all_digits(*key))
      log_warn("%s: JSON Lines fields are chosen by key; '%s' is used as a key, not an index", path.c_str(),
               key->c_str());
  for_each_line(text, [&](int64_t line, const std::string& row) {
    if (std::all_of(row.begin(), row.end(), [](unsigned char c) { return std::isspace(c); })) return;
    if (!is_valid_utf8(row.data(), row.size())) { builder.bad_row(line, "invalid UTF-8"); return; }
    nlohmann::json object;
    try {
      object = nlohmann::json::parse(row);
    } catch (const nlohmann::json::exception& e) {
      // parse_error, and out_of_range for a number beyond double (1e400).
      builder.bad_row(line, std::string("malformed JSON: ") + e.what());
      return;
    }
    if (!object.is_object()) { builder.bad_row(line, "malformed JSON: expected an object per line"); return; }

    auto text_field = [&](const std::string& key, std::string* out) -> std::optional<std::string> {
      auto it = object.find(key);
      if (it == object.end() || it->is_null()) return "missing field '" + key + "'";
      if (!it->is_string()) return "field '" + key + "' is not a string";
      *out = it->get<std::string>();
      return std::nullopt;
    };
    std::string a, b_text, label;
    std::optional<std::string> problem = text_field(options.text_a, &a);
    if (!problem && !options.text_b.empty()) problem = text_field(options.text_b, &b_text);
    if (!problem && !options.label.empty()) {
      auto it = object.find(options.label);
      if (it == object.end() || it->is_null()) problem = "missing field '" + options.label + "'";
      else if (it->is_string()) label = it->get<std::string>();
      else if (it->is_number_integer()) label = std::to_string(it->get<int64_t>());
      else if (it->is_number()) label = it->dump();
      else problem = "label field '" + options.label + "' is not a number or string";
    }
    if (problem) { builder.bad_row(line, *problem); return; }
    std::optional<std::string> b;
    if (!options.text_b.empty()) b = std::move(b_text);
    builder.add(line, std::move(a), std::move(b), label);
  });
}

// Files that are not UTF-8 text with LF or CRLF line ends are named as such
// before any row is parsed: read as UTF-8, a UTF-16 file is rows of raw bytes,
// and a file with CR-only line ends is one line, its header the whole file.
void check_text_encoding(const std::string& text, const std::string& path) {
  const auto starts = [&](const char* bytes, size_t n) { return text.size() >= n && text.compare(0, n, bytes, n) == 0; };
  const char* kind = starts("\xFF\xFE\x00\x00", 4) || starts("\x00\x00\xFE\xFF", 4) ? "UTF-32"
                     : starts("\xFF\xFE", 2) || starts("\xFE\xFF", 2)                   ? "UTF-16"
                                                                                           : nullptr;
  // Without a byte-order mark: UTF-16 text of ASCII characters has a NUL in every other byte.
  const size_t sample = std::min<size_t>(text.size(), 4096);
  if (!kind && std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(sample), '\0') * 4 >
                   static_cast<std::ptrdiff_t>(sample))
    kind = "UTF-16?";
  if (kind)
    throw Error(path + ": not UTF-8 (" + kind + "); convert it to UTF-8, e.g. iconv -f UTF-16 -t UTF-8 '" + path +
                "' > out.tsv");
  const size_t first_lf = text.find('\n');
  const size_t first_cr = text.find('\r');
  if (first_cr != std::string::npos && first_cr < first_lf && first_cr + 1 != first_lf)
    throw Error(path + ": lines end in CR alone (old Mac line ends), so the whole file would read as one line; "
                       "convert them to LF, e.g. tr '\\r' '\\n' < '" + path + "' > out.tsv");
}

}  // namespace

RawTable read_table_from_string(const std::string& content, const std::string& path,
                                const ReaderOptions& options) {
  if (options.text_a.empty()) throw Error("data.text_a: no text column given for " + path);
  FileFormat format = options.format == FileFormat::kAuto ? format_from_extension(path) : options.format;
  check_text_encoding(content, path);
  std::string text = content;
  if (text.size() >= 3 && text.compare(0, 3, "\xEF\xBB\xBF") == 0) text.erase(0, 3);

  TableBuilder builder(path, options);
  switch (format) {
    case FileFormat::kTsv: read_delimited(split_tsv(text), path, options, builder); break;
    case FileFormat::kCsv: read_delimited(split_csv(text), path, options, builder); break;
    case FileFormat::kJsonl: read_jsonl(text, path, options, builder); break;
    case FileFormat::kConll:
      throw Error(path + ": data.format = \"conll\" is the token-classification format (model.task = "
                  "\"token_classification\")");
    case FileFormat::kAuto: ST_ASSERT(false, "format resolved above");
  }
  return builder.finish();
}

RawTable read_table(const std::string& path, const ReaderOptions& options) {
  // As model files are checked: /dev/zero or a FIFO would be read until memory runs out, or forever.
  require_regular_file(path, "data file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open data file");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw Error(path + ": read error");
  return read_table_from_string(buffer.str(), path, options);
}

}  // namespace shardtrain
