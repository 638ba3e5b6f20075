// Multiple-choice data (model.task = "multiple_choice"), as
// run_swag_no_trainer.py reads it: per row a context, the candidate choices
// and the index of the right one. Each choice becomes one sequence pair
// (first text, second text), and the model scores each pair with one logit.
//
// Columns (jsonl keys, or csv / tsv header names or 0-based indices):
//   context_column   the first text of every pair (data.text_a)
//   prefix_column    optional (data.text_b): put before each choice with a
//                    space, as SWAG's sent2 ("" = none)
//   choice_columns   the choices, one column each (data.choices); or one
//                    column holding a list of choices per row
//   label_column     the right choice's 0-based index ("" = none, for predict)
// Presets (data.preset) fill these when unset (tasks/multiple_choice rules):
//   swag   sent1; sent2; ending0..ending3; label. Pair i = (sent1, sent2 + " " + ending_i).
//   copa   premise; question; choice1, choice2; label (COPA, XCOPA). The question
//          ("cause" / "effect") becomes a question after the premise, as jiant
//          formats COPA: pair i = (premise + " What was the cause of this?" or
//          " What happened as a result?", choice_i).
// Every row must have the same number of choices (num_choices, or most rows'
// number, so that an odd first row is the one named), and a label below it. A row that breaks a rule is a bad row: an
// error naming the file and the line, or (kSkip) dropped and counted.
//
//   MultipleChoiceOptions options;
//   options.preset = DataPreset::kCopa; options.context_column = "premise"; ...
//   MultipleChoiceTable table = read_multiple_choice("val.it.jsonl", options);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardtrain/core/enum_names.h"
#include "shardtrain/data/reader.h"

namespace shardtrain {

struct MultipleChoiceOptions {
  FileFormat format = FileFormat::kAuto;
  std::string context_column;
  std::string prefix_column;
  std::vector<std::string> choice_columns;
  std::string label_column;
  DataPreset preset = DataPreset::kNone;
  int64_t num_choices = 0;  // 0 = most rows' number (ties: the earliest)
  BadRowPolicy on_bad_row = BadRowPolicy::kError;
};

struct MultipleChoiceTable {
  std::string path;
  int64_t num_choices = 0;
  std::vector<std::string> first;                 // per row
  std::vector<std::vector<std::string>> second;   // per row, per choice
  std::vector<int64_t> line_numbers;              // per row
  Labels labels;                                  // kClass (the right choice) or kNone
  int64_t num_bad_rows = 0;

  int64_t size() const { return static_cast<int64_t>(first.size()); }
};

// The columns a preset names (the same for train and predict): SWAG's sent1,
// sent2, ending0..3, label; COPA's premise, question, choice1, choice2, label.
// kNone: all empty.
struct ChoiceColumns {
  std::string context, prefix, label;
  std::vector<std::string> choices;
};
ChoiceColumns preset_columns(DataPreset preset);

MultipleChoiceTable read_multiple_choice(const std::string& path, const MultipleChoiceOptions& options);
MultipleChoiceTable read_multiple_choice_from_string(const std::string& content, const std::string& path,
                                          const MultipleChoiceOptions& options);

}  // namespace shardtrain
