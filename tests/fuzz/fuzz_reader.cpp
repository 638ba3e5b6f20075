// libFuzzer target: the TSV / CSV / JSONL readers with label handling
// (read_table_from_string, src/data/label_table.cpp). The first byte picks the
// format, label mode, bad-row policy, class count and whether there is a text_b
// column; the rest is the file (columns sentence1, sentence2, label). What is
// read must be consistent: one line number and label per row, class ids below
// the class count. Seeds: corpus/reader.
#include <cstdint>
#include <string>

#include "fuzz_support.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/data/reader.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  shardtrain::set_log_rank(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardtrain;
  if (size < 1) return 0;
  const uint8_t knobs = data[0];
  const std::string content(reinterpret_cast<const char*>(data + 1), size - 1);
  static const char* const kNames[] = {"fuzz.tsv", "fuzz.csv", "fuzz.jsonl", "fuzz.tsv"};
  const std::string path = kNames[knobs & 3];
  ReaderOptions options;
  options.text_a = "sentence1";
  if (knobs & 4) options.text_b = "sentence2";
  static const LabelMode kModes[] = {LabelMode::kAuto, LabelMode::kNamed, LabelMode::kRegression, LabelMode::kAuto};
  options.label_mode = kModes[(knobs >> 3) & 3];
  if (((knobs >> 3) & 3) != 3) options.label = "label";  // 3: a prediction file, no labels
  options.on_bad_row = (knobs & 32) ? BadRowPolicy::kSkip : BadRowPolicy::kError;
  static const int64_t kClasses[] = {0, kInferClasses, 2, 3};
  options.num_classes = kClasses[(knobs >> 6) & 3];
  if (options.label_mode == LabelMode::kRegression) options.num_classes = 0;
  try {
    const RawTable table = read_table_from_string(content, path, options);
    const size_t rows = table.text_a.size();
    FUZZ_REQUIRE(table.line_numbers.size() == rows);
    FUZZ_REQUIRE(!table.has_text_b || table.text_b.size() == rows);
    const Labels& labels = table.labels;
    if (labels.kind == LabelKind::kClass) {
      FUZZ_REQUIRE(labels.class_ids.size() == rows);
      for (int64_t id : labels.class_ids) FUZZ_REQUIRE(id >= 0 && id < labels.num_classes());
      if (options.num_classes > 0 && labels.names.empty()) FUZZ_REQUIRE(labels.num_classes() <= options.num_classes);
    } else if (labels.kind == LabelKind::kRegression) {
      FUZZ_REQUIRE(labels.values.size() == rows);
    } else {
      FUZZ_REQUIRE(options.label.empty());
    }
    for (const std::string& text : table.text_a) FUZZ_REQUIRE(is_valid_utf8(text.data(), text.size()));
  } catch (const Error&) {
  }
  return 0;
}
