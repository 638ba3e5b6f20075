// Token-classification readers (data/word_table.h): CoNLL columns, and the
// word / tag lists of JSON Lines, csv and tsv rows.
#include "shardtrain/data/word_table.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/data/reader.h"

namespace shardtrain {
namespace {

bool is_blank(const std::string& line) {
  return std::all_of(line.begin(), line.end(), [](unsigned char c) { return std::isspace(c); });
}

// A CoNLL line's columns: tab-separated when it has a tab, else split on runs of spaces.
std::vector<std::string> conll_columns(const std::string& line) {
  std::vector<std::string> columns;
  if (line.find('\t') != std::string::npos) {
    size_t start = 0;
    while (true) {
      const size_t tab = line.find('\t', start);
      columns.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
      if (tab == std::string::npos) break;
      start = tab + 1;
    }
    return columns;
  }
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    if (i == line.size()) break;
    size_t end = line.find(' ', i);
    if (end == std::string::npos) end = line.size();
    columns.push_back(line.substr(i, end - i));
    i = end;
  }
  return columns;
}

// A sentence as read, before its tags become ids.
struct RawSentence {
  int64_t line = 0;
  std::vector<std::string> words;
  std::vector<std::string> tags;
  std::vector<int64_t> tag_lines;  // CoNLL: each tag's line (an unknown tag is named there)
};

// Collects sentences and bad rows, then turns tags into ids.
class WordTableBuilder {
 public:
  WordTableBuilder(const std::string& path, const WordTableOptions& options) : options_(options) {
    table_.path = path;
    table_.has_tags = options.with_tags;
  }

  void bad_row(int64_t line, const std::string& what) {
    if (options_.on_bad_row == BadRowPolicy::kError)
      throw Error(str_format("%s:%lld: %s", table_.path.c_str(), static_cast<long long>(line), shorten(what, 400).c_str()));
    ++table_.num_bad_rows;
  }

  // Rows a lower reader already skipped under BadRowPolicy::kSkip.
  void count_skipped(int64_t n) { table_.num_bad_rows += n; }

  void add(RawSentence sentence) {
    if (sentence.words.empty()) return bad_row(sentence.line, "a sentence with no words");
    if (options_.with_tags && sentence.tags.size() != sentence.words.size())
      return bad_row(sentence.line, str_format("%zu words but %zu tags", sentence.words.size(), sentence.tags.size()));
    for (const std::string& word : sentence.words)
      if (!is_valid_utf8(word.data(), word.size())) return bad_row(sentence.line, "invalid UTF-8");
    sentences_.push_back(std::move(sentence));
  }

  WordTable finish() {
    if (options_.with_tags) resolve_tags();
    for (RawSentence& s : sentences_) {
      table_.line_numbers.push_back(s.line);
      table_.words.push_back(std::move(s.words));
    }
    return std::move(table_);
  }

 private:
  // Tag names -> ids: the fixed names, or this file's sorted tags; integer
  // tags are ids into the fixed names.
  void resolve_tags() {
    std::vector<std::string> names = options_.tag_names;
    const bool all_integers = std::all_of(sentences_.begin(), sentences_.end(), [](const RawSentence& s) {
      return std::all_of(s.tags.begin(), s.tags.end(), [](const std::string& t) {
        return !t.empty() && std::all_of(t.begin(), t.end(), [](unsigned char c) { return std::isdigit(c); });
      });
    });
    const bool numeric = all_integers && !sentences_.empty() &&
                         std::none_of(names.begin(), names.end(), [](const std::string& n) {
                           return !n.empty() && std::all_of(n.begin(), n.end(), [](unsigned char c) { return std::isdigit(c); });
                         });
    if (numeric && names.empty()) names = options_.id_names;  // the model's id2label, when it has names
    if (numeric && names.empty())
      throw Error(table_.path + ": the tags are integer ids, which name no entity type; give their names in id order "
                  "as data.labels (e.g. [\"O\", \"B-person\", \"I-person\", ...], the data set's ClassLabel names)");
    if (names.empty()) {
      std::set<std::string> distinct;
      for (const RawSentence& s : sentences_) distinct.insert(s.tags.begin(), s.tags.end());
      names.assign(distinct.begin(), distinct.end());  // byte order = Python's sorted() on str
    }
    std::map<std::string, int32_t> ids;
    for (size_t i = 0; i < names.size(); ++i) ids.emplace(names[i], static_cast<int32_t>(i));
    std::vector<RawSentence> kept;
    for (RawSentence& s : sentences_) {
      std::vector<int32_t> tag_ids;
      std::optional<std::string> problem;
      int64_t problem_line = s.line;
      for (size_t t = 0; t < s.tags.size(); ++t) {
        const std::string& tag = s.tags[t];
        if (t < s.tag_lines.size()) problem_line = s.tag_lines[t];
        if (numeric) {
          const long long id = std::strtoll(tag.c_str(), nullptr, 10);
          if (tag.size() > 9 || id >= static_cast<long long>(names.size())) {
            problem = str_format("tag id %s is not below the %zu names of data.labels", shorten(tag, 20).c_str(),
                                 names.size());
            break;
          }
          tag_ids.push_back(static_cast<int32_t>(id));
          continue;
        }
        auto found = ids.find(tag);
        if (found == ids.end()) {
          problem = "tag '" + shorten(tag, 60) + "' is not one of the " + std::to_string(names.size()) + " tags " +
                    (options_.tag_names.empty() ? std::string("of this file")
                                                : "it is trained with (" + shorten(quoted_list(names), 300) + ")");
          break;
        }
        tag_ids.push_back(found->second);
      }
      if (problem) {
        bad_row(problem_line, *problem);
        continue;
      }
      table_.tags.push_back(std::move(tag_ids));
      kept.push_back(std::move(s));
    }
    sentences_ = std::move(kept);
    table_.tag_names = std::move(names);
  }

  WordTableOptions options_;
  WordTable table_;
  std::vector<RawSentence> sentences_;
};

std::optional<int> column_index(const std::string& spec) {
  if (spec.empty() || spec.size() > 6 || !std::all_of(spec.begin(), spec.end(), [](unsigned char c) { return std::isdigit(c); }))
    return std::nullopt;
  return std::stoi(spec);
}

// The lines of a CoNLL file, a CR of CRLF removed.
std::vector<std::string> conll_lines(const std::string& text) {
  std::vector<std::string> lines;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(pos, end - pos));
    if (!lines.back().empty() && lines.back().back() == '\r') lines.back().pop_back();
    pos = end + 1;
  }
  return lines;
}

// The column count of most word lines (ties: the earliest). Not the first
// line's: a bad first line would make every good line after it bad, and an
// error would name a good line.
size_t usual_width(const std::vector<std::string>& lines) {
  std::map<size_t, std::pair<int64_t, int64_t>> seen;  // width -> (lines, -first line)
  for (size_t i = 0; i < lines.size(); ++i) {
    if (is_blank(lines[i])) continue;
    const std::vector<std::string> columns = conll_columns(lines[i]);
    if (columns[0] == "-DOCSTART-") continue;
    ++seen.try_emplace(columns.size(), 0, -static_cast<int64_t>(i)).first->second.first;
  }
  size_t best = 0;
  std::pair<int64_t, int64_t> best_score{-1, 0};
  for (const auto& [width, score] : seen)
    if (score > best_score) best_score = score, best = width;
  return best;
}

void read_conll(const std::string& text, const WordTableOptions& options, WordTableBuilder& builder,
                const std::string& path) {
  const std::optional<int> words_at = column_index(options.words_column);
  const std::optional<int> tags_at = column_index(options.tags_column);
  const std::vector<std::string> lines = conll_lines(text);
  const size_t width = usual_width(lines);
  RawSentence sentence;
  bool sentence_bad = false;
  auto close = [&]() {
    if (!sentence.words.empty() && !sentence_bad) builder.add(std::move(sentence));
    sentence = RawSentence{};
    sentence_bad = false;
  };
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& row = lines[i];
    const int64_t line = static_cast<int64_t>(i) + 1;
    if (is_blank(row)) {
      close();
      continue;
    }
    const std::vector<std::string> columns = conll_columns(row);
    if (columns[0] == "-DOCSTART-") {
      close();
      continue;
    }
    if (sentence.words.empty()) sentence.line = line;
    if (sentence_bad) continue;
    auto bad = [&](const std::string& what) {
      builder.bad_row(line, what);  // throws under kError
      sentence_bad = true;
    };
    if (!is_valid_utf8(row.data(), row.size())) { bad("invalid UTF-8"); continue; }
    if (columns.size() != width) {
      bad(str_format("%zu columns, but the file's word lines have %zu", columns.size(), width));
      continue;
    }
    const size_t word_column = words_at ? static_cast<size_t>(*words_at) : 0;
    const size_t tag_column = tags_at ? static_cast<size_t>(*tags_at) : columns.size() - 1;
    if (word_column >= columns.size()) {
      bad(str_format("data.text_a = %zu: the line has %zu columns", word_column, columns.size()));
      continue;
    }
    sentence.words.push_back(columns[word_column]);
    if (!options.with_tags) continue;
    if (tag_column >= columns.size() || tag_column == word_column) {
      bad(str_format("no tag column: the line has %zu column(s)%s", columns.size(),
                     tags_at ? str_format(" and data.label = %d", *tags_at).c_str() : ""));
      continue;
    }
    sentence.tags.push_back(columns[tag_column]);
    sentence.tag_lines.push_back(line);
  }
  close();
  (void)path;
}

void read_rows(const std::string& text, const std::string& path, FileFormat format, const WordTableOptions& options,
               WordTableBuilder& builder) {
  std::vector<FieldSpec> fields = {{"data.text_a", options.words_column}};
  if (options.with_tags) fields.push_back({"data.label", options.tags_column});
  // Bad rows are the builder's to count, so read_fields throws only for the file itself.
  const FieldRows rows = read_fields(text, path, format, fields, options.on_bad_row);
  builder.count_skipped(rows.num_bad_rows);
  for (size_t r = 0; r < rows.rows.size(); ++r) {
    RawSentence sentence;
    sentence.line = rows.line_numbers[r];
    const FieldValue& words = rows.rows[r][0];
    if (!words.is_list) {
      builder.bad_row(sentence.line, "field '" + options.words_column + "' is not a list of words");
      continue;
    }
    sentence.words = words.list;
    if (options.with_tags) {
      const FieldValue& tags = rows.rows[r][1];
      if (!tags.is_list) {
        builder.bad_row(sentence.line, "field '" + options.tags_column + "' is not a list of tags");
        continue;
      }
      sentence.tags = tags.list;
    }
    builder.add(std::move(sentence));
  }
}

}  // namespace

WordTable read_word_table_from_string(const std::string& content, const std::string& path,
                                      const WordTableOptions& options) {
  const FileFormat format = options.format == FileFormat::kAuto ? format_from_extension(path) : options.format;
  WordTableBuilder builder(path, options);
  std::string text = content;
  if (text.size() >= 3 && text.compare(0, 3, "\xEF\xBB\xBF") == 0) text.erase(0, 3);
  if (format == FileFormat::kConll)
    read_conll(text, options, builder, path);
  else
    read_rows(text, path, format, options, builder);
  return builder.finish();
}

WordTable read_word_table(const std::string& path, const WordTableOptions& options) {
  return read_word_table_from_string(read_data_file(path), path, options);
}

bool word_table_has_tags(const std::string& path, const WordTableOptions& options) {
  const FileFormat format = options.format == FileFormat::kAuto ? format_from_extension(path) : options.format;
  if (format != FileFormat::kConll) return file_has_column(path, format, options.tags_column);
  const size_t width = usual_width(conll_lines(read_data_file(path)));
  const size_t words_at = column_index(options.words_column).value_or(0);
  const std::optional<int> tags_at = column_index(options.tags_column);
  const size_t tag_column = tags_at ? static_cast<size_t>(*tags_at) : (width == 0 ? 0 : width - 1);
  return tag_column < width && tag_column != words_at;
}

std::vector<int32_t> b_to_i_map(const std::vector<std::string>& tag_names) {
  std::map<std::string, int32_t> ids;
  for (size_t i = 0; i < tag_names.size(); ++i) ids.emplace(tag_names[i], static_cast<int32_t>(i));
  std::vector<int32_t> out;
  for (size_t i = 0; i < tag_names.size(); ++i) {
    const std::string& name = tag_names[i];
    if (name.rfind("B-", 0) == 0) {
      // Python's label.replace("B-", "I-"): every occurrence.
      std::string inside = name;
      for (size_t at = inside.find("B-"); at != std::string::npos; at = inside.find("B-", at + 2)) inside[at] = 'I';
      auto found = ids.find(inside);
      if (found != ids.end()) {
        out.push_back(found->second);
        continue;
      }
    }
    out.push_back(static_cast<int32_t>(i));
  }
  return out;
}

}  // namespace shardtrain
