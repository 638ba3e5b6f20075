// libFuzzer target: the token-classification and multiple-choice readers
// (read_word_table_from_string, read_multiple_choice_from_string). The first
// byte picks the reader and format, tags fixed or collected, the preset and
// the bad-row policy; the rest is the file. What is read must be consistent:
// as many tags as words in every sentence, tag ids below the names, one line
// per row, every row with the table's number of choices, labels below it.
// Seeds: corpus/task_data.
#include <cstdint>
#include <string>

#include "fuzz_support.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/data/multiple_choice.h"
#include "shardtrain/data/word_table.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  shardtrain::set_log_rank(1);
  return 0;
}

namespace {

void words(const std::string& content, uint8_t knobs) {
  using namespace shardtrain;
  static const char* const kNames[] = {"fuzz.conll", "fuzz.jsonl", "fuzz.csv", "fuzz.tsv"};
  WordTableOptions options;
  options.with_tags = !(knobs & 8);
  if (knobs & 16) options.tag_names = {"O", "B-PER", "I-PER"};
  if (knobs & 32) options.id_names = {"O", "B-LOC"};
  options.on_bad_row = (knobs & 64) ? BadRowPolicy::kSkip : BadRowPolicy::kError;
  const WordTable table = read_word_table_from_string(content, kNames[(knobs >> 1) & 3], options);
  FUZZ_REQUIRE(table.line_numbers.size() == table.words.size());
  if (table.has_tags) {
    FUZZ_REQUIRE(table.tags.size() == table.words.size());
    for (size_t i = 0; i < table.tags.size(); ++i) {
      FUZZ_REQUIRE(table.tags[i].size() == table.words[i].size());
      for (int32_t tag : table.tags[i])
        FUZZ_REQUIRE(tag >= 0 && static_cast<size_t>(tag) < table.tag_names.size());
    }
  }
  for (const auto& sentence : table.words) FUZZ_REQUIRE(!sentence.empty());
}

void choices(const std::string& content, uint8_t knobs) {
  using namespace shardtrain;
  static const char* const kNames[] = {"fuzz.jsonl", "fuzz.csv", "fuzz.tsv", "fuzz.jsonl"};
  MultipleChoiceOptions options;
  options.preset = (knobs & 8) ? DataPreset::kCopa : DataPreset::kNone;
  const ChoiceColumns columns = preset_columns(options.preset == DataPreset::kCopa ? DataPreset::kCopa
                                                                                    : DataPreset::kSwag);
  options.context_column = columns.context;
  options.prefix_column = (knobs & 16) ? columns.prefix : "";
  options.choice_columns = (knobs & 32) ? std::vector<std::string>{"choices"} : columns.choices;
  if (!(knobs & 128)) options.label_column = "label";
  options.on_bad_row = (knobs & 64) ? BadRowPolicy::kSkip : BadRowPolicy::kError;
  const MultipleChoiceTable table = read_multiple_choice_from_string(content, kNames[(knobs >> 1) & 3], options);
  FUZZ_REQUIRE(table.second.size() == table.first.size());
  FUZZ_REQUIRE(table.line_numbers.size() == table.first.size());
  for (const auto& row : table.second) FUZZ_REQUIRE(static_cast<int64_t>(row.size()) == table.num_choices);
  if (table.labels.kind == LabelKind::kClass) {
    FUZZ_REQUIRE(table.labels.class_ids.size() == table.first.size());
    for (int64_t id : table.labels.class_ids) FUZZ_REQUIRE(id >= 0 && id < table.num_choices);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t knobs = data[0];
  const std::string content(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    if (knobs & 1) choices(content, knobs);
    else words(content, knobs);
  } catch (const shardtrain::Error&) {
    // A refused file is fine; a crash, a sanitizer report or a broken invariant is not.
  }
  return 0;
}
