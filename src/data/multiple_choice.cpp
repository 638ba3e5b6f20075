// Multiple-choice readers (data/multiple_choice.h).
#include "shardtrain/data/multiple_choice.h"

#include <algorithm>
#include <map>

#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain {
namespace {

// jiant's COPA questions.
std::optional<std::string> copa_question(const std::string& question) {
  if (question == "cause") return std::string("What was the cause of this?");
  if (question == "effect") return std::string("What happened as a result?");
  return std::nullopt;
}

// The number of choices of most rows (ties: the earliest). Not the first
// row's: a bad first row would make every good row after it bad, and an error
// would name a good row.
int64_t usual_num_choices(const FieldRows& rows, size_t first_choice, size_t num_columns) {
  std::map<int64_t, std::pair<int64_t, int64_t>> seen;  // choices -> (rows, -first row)
  for (size_t r = 0; r < rows.rows.size(); ++r) {
    const FieldValue& value = rows.rows[r][first_choice];
    const int64_t n = static_cast<int64_t>(num_columns == 1 && value.is_list ? value.list.size() : num_columns);
    ++seen.try_emplace(n, 0, -static_cast<int64_t>(r)).first->second.first;
  }
  int64_t best = 0;
  std::pair<int64_t, int64_t> best_score{-1, 0};
  for (const auto& [n, score] : seen)
    if (score > best_score) best_score = score, best = n;
  return best;
}

// A row's label: a choice index (0, 1, ...) below `num_choices`; nullopt, with
// `problem` set, when it is not.
std::optional<int64_t> choice_label(const FieldValue& value, int64_t num_choices, std::string* problem) {
  const std::string& t = value.text;
  const bool integer = !value.is_list && !t.empty() && t.size() < 10 &&
                       std::all_of(t.begin(), t.end(), [](unsigned char c) { return std::isdigit(c); });
  if (!integer) {
    *problem = "data.label: '" + shorten(value.is_list ? std::string("a list") : t, 40) +
               "' is not a choice index (0, 1, ...)";
    return std::nullopt;
  }
  const int64_t label = std::stoll(t);
  if (label >= num_choices) {
    *problem = str_format("data.label = %lld, but the row has %lld choices (indices from 0)",
                          static_cast<long long>(label), static_cast<long long>(num_choices));
    return std::nullopt;
  }
  return label;
}

// A row's texts: `first`, the context (COPA: with its question appended), and
// `second`, one per choice (SWAG: after the prefix). False, with `problem` set,
// when COPA's question is neither "cause" nor "effect".
bool choice_texts(const MultipleChoiceOptions& options, const std::string& prefix,
                  const std::vector<std::string>& choices, std::string* first, std::vector<std::string>* second,
                  std::string* problem) {
  if (options.preset == DataPreset::kCopa) {
    const std::optional<std::string> question = copa_question(prefix);
    if (!question) {
      *problem = "data.text_b (COPA's question): '" + shorten(prefix, 40) + "' is neither \"cause\" nor \"effect\"";
      return false;
    }
    *first += " " + *question;
    *second = choices;
  } else {
    // run_swag: f"{header} {ending}", a space even when the header is empty.
    for (const std::string& choice : choices)
      second->push_back(options.prefix_column.empty() ? choice : prefix + " " + choice);
  }
  return true;
}

}  // namespace

ChoiceColumns preset_columns(DataPreset preset) {
  switch (preset) {
    case DataPreset::kSwag: return {"sent1", "sent2", "label", {"ending0", "ending1", "ending2", "ending3"}};
    case DataPreset::kCopa: return {"premise", "question", "label", {"choice1", "choice2"}};
    case DataPreset::kNone: break;
  }
  return {};
}

MultipleChoiceTable read_multiple_choice_from_string(const std::string& content, const std::string& path,
                                          const MultipleChoiceOptions& options) {
  if (options.context_column.empty()) throw Error("data.text_a: no context column given for " + path);
  if (options.choice_columns.empty()) throw Error("data.choices: no choice column given for " + path);
  std::vector<FieldSpec> fields = {{"data.text_a", options.context_column}};
  if (!options.prefix_column.empty()) fields.push_back({"data.text_b", options.prefix_column});
  const size_t first_choice = fields.size();
  for (const std::string& column : options.choice_columns) fields.push_back({"data.choices", column});
  const bool labelled = !options.label_column.empty();
  if (labelled) fields.push_back({"data.label", options.label_column});
  const FileFormat format = options.format == FileFormat::kAuto ? format_from_extension(path) : options.format;
  const FieldRows rows = read_fields(content, path, format, fields, options.on_bad_row);

  MultipleChoiceTable table;
  table.path = path;
  table.num_bad_rows = rows.num_bad_rows;
  table.num_choices =
      options.num_choices > 0 ? options.num_choices : usual_num_choices(rows, first_choice, options.choice_columns.size());
  table.labels.kind = labelled ? LabelKind::kClass : LabelKind::kNone;
  auto bad_row = [&](int64_t line, const std::string& what) {
    if (options.on_bad_row == BadRowPolicy::kError)
      throw Error(str_format("%s:%lld: %s", path.c_str(), static_cast<long long>(line), shorten(what, 400).c_str()));
    ++table.num_bad_rows;
  };
  for (size_t r = 0; r < rows.rows.size(); ++r) {
    const std::vector<FieldValue>& row = rows.rows[r];
    const int64_t line = rows.line_numbers[r];
    auto text = [&](size_t i, const char* key) -> std::optional<std::string> {
      if (row[i].is_list) {
        bad_row(line, std::string(key) + ": expected a text, found a list");
        return std::nullopt;
      }
      return row[i].text;
    };
    std::optional<std::string> context = text(0, "data.text_a");
    if (!context) continue;
    std::string prefix;
    if (!options.prefix_column.empty()) {
      std::optional<std::string> p = text(1, "data.text_b");
      if (!p) continue;
      prefix = *p;
    }
    std::vector<std::string> choices;
    if (options.choice_columns.size() == 1 && row[first_choice].is_list) {
      choices = row[first_choice].list;
    } else {
      bool ok = true;
      for (size_t c = 0; c < options.choice_columns.size() && ok; ++c) {
        std::optional<std::string> choice = text(first_choice + c, "data.choices");
        ok = choice.has_value();
        if (ok) choices.push_back(*choice);
      }
      if (!ok) continue;
    }
    if (static_cast<int64_t>(choices.size()) != table.num_choices) {
      bad_row(line, str_format("%zu choices, but the data has %lld per row", choices.size(),
                               static_cast<long long>(table.num_choices)));
      continue;
    }
    if (table.num_choices < 2) {
      bad_row(line, str_format("%zu choice(s): a multiple-choice row needs at least 2", choices.size()));
      continue;
    }
    int64_t label = -1;
    std::string problem;
    if (labelled) {
      const std::optional<int64_t> index = choice_label(row.back(), table.num_choices, &problem);
      if (!index) {
        bad_row(line, problem);
        continue;
      }
      label = *index;
    }
    std::string first = *context;
    std::vector<std::string> second;
    if (!choice_texts(options, prefix, choices, &first, &second, &problem)) {
      bad_row(line, problem);
      continue;
    }
    bool utf8 = is_valid_utf8(first.data(), first.size());
    for (const std::string& s : second) utf8 = utf8 && is_valid_utf8(s.data(), s.size());
    if (!utf8) { bad_row(line, "invalid UTF-8"); continue; }
    table.first.push_back(std::move(first));
    table.second.push_back(std::move(second));
    table.line_numbers.push_back(line);
    if (labelled) table.labels.class_ids.push_back(label);
  }
  return table;
}

MultipleChoiceTable read_multiple_choice(const std::string& path, const MultipleChoiceOptions& options) {
  return read_multiple_choice_from_string(read_data_file(path), path, options);
}

}  // namespace shardtrain
