// Label sets (data/reader.h): one kind of label per file, class ids 0..K-1
// when the classes are inferred, eval labels within the training data's
// classes; every refusal names file:line; long labels are cut in messages.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <functional>
#include <string>

#include "shardtrain/core/check.h"
#include "shardtrain/data/reader.h"

using namespace shardtrain;

namespace {

ReaderOptions label_options(int64_t num_classes = 0) {
  ReaderOptions o;
  o.text_a = "text";
  o.label = "label";
  o.num_classes = num_classes;
  return o;
}

// A TSV with one row per label, on lines 2, 3, ...
std::string label_tsv(const std::vector<std::string>& labels) {
  std::string out = "text\tlabel\n";
  for (size_t i = 0; i < labels.size(); ++i) out += "row " + std::to_string(i) + "\t" + labels[i] + "\n";
  return out;
}

std::string label_error(const std::vector<std::string>& labels, const ReaderOptions& options,
                        const std::string& path = "train.tsv") {
  try {
    read_table_from_string(label_tsv(labels), path, options);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("one stray label of the other kind is a bad row naming file:line") {
  CHECK(label_error({"0", "1", "1", "abc", "0"}, label_options()) ==
        "train.tsv:5: label 'abc' is not an integer, but 4 of the 5 labels are integers (class ids); every label "
        "must be of one kind");
  CHECK(label_error({"0", "1", "1.5", "0"}, label_options()) ==
        "train.tsv:4: label '1.5' is not an integer, but 3 of the 4 labels are integers (class ids); every label "
        "must be of one kind");
  CHECK(label_error({"neg", "pos", "7", "pos"}, label_options()) ==
        "train.tsv:4: label '7' is an integer, but 3 of the 4 labels are names; every label must be of one kind");
  // Consistent sets are fine: integers as given, names sorted, "-1"/"1" as names (as always).
  CHECK(read_table_from_string(label_tsv({"neg", "pos", "neg"}), "t.tsv", label_options()).labels.names ==
        std::vector<std::string>{"neg", "pos"});
  const RawTable signs = read_table_from_string(label_tsv({"-1", "1", "1"}), "t.tsv", label_options());
  CHECK(signs.labels.names == std::vector<std::string>{"-1", "1"});
  CHECK(signs.labels.class_ids == std::vector<int64_t>{0, 1, 1});
}

TEST_CASE("inferred classes: integer labels must be exactly 0..K-1") {
  CHECK(read_table_from_string(label_tsv({"0", "2", "1", "2"}), "t.tsv", label_options(kInferClasses))
            .labels.num_classes() == 3);
  // A stray "7" in a binary file does not make an 8-class model.
  CHECK(label_error({"0", "1", "7", "1"}, label_options(kInferClasses)) ==
        "train.tsv:4: label 7: integer labels are the class ids 0..K-1, each used by some row, but no row has label 2 "
        "(labels found: 0, 1, 7); fix the row, or set model.num_labels");
  // One-based labels: the first row already refers to a class above an unused 0.
  CHECK(label_error({"1", "2", "2"}, label_options(kInferClasses)) ==
        "train.tsv:2: label 1: integer labels are the class ids 0..K-1, each used by some row, but no row has label 0 "
        "(labels found: 1, 2); fix the row, or set model.num_labels");
  // A label value of 1e9 is no 1e9-class model either.
  CHECK(label_error({"0", "1", "1000000000"}, label_options(kInferClasses)).rfind("train.tsv:4: label 1000000000:", 0) ==
        0);
  // Even as given, no class id reaches the label limit.
  CHECK(label_error({"0", "1000000000"}, label_options()) ==
        "train.tsv:3: label 1000000000: class ids must be below 1048576 (the most labels a classifier may have)");
  // Without inference (prediction files) a subset of classes is fine.
  CHECK(read_table_from_string(label_tsv({"1", "1"}), "t.tsv", label_options()).labels.class_ids ==
        std::vector<int64_t>{1, 1});
}

TEST_CASE("eval labels never add classes") {
  ReaderOptions eval = label_options(2);
  eval.class_source = "the training data (train.tsv)";
  CHECK(read_table_from_string(label_tsv({"1", "0"}), "dev.tsv", eval).labels.class_ids ==
        std::vector<int64_t>{1, 0});
  CHECK(read_table_from_string(label_tsv({"1", "1"}), "dev.tsv", eval).labels.class_ids ==
        std::vector<int64_t>{1, 1});  // a subset: fine
  CHECK(label_error({"0", "1", "2"}, eval, "dev.tsv") ==
        "dev.tsv:4: label 2 is outside the 2 classes of the training data (train.tsv) (0..1)");
  // Named labels against the training data's names.
  ReaderOptions named = label_options();
  named.label_names = {"neg", "pos"};
  CHECK(label_error({"neg", "neutral"}, named, "dev.tsv") ==
        "dev.tsv:3: label 'neutral' is not one of the training labels (neg, pos)");
}

TEST_CASE("on_bad_row = skip drops the stray rows, counts them and keeps the lines right") {
  ReaderOptions skip = label_options(kInferClasses);
  skip.on_bad_row = BadRowPolicy::kSkip;
  const RawTable t = read_table_from_string(label_tsv({"0", "abc", "1", "7", "1", "0"}), "t.tsv", skip);
  CHECK(t.num_bad_rows == 2);
  CHECK(t.labels.class_ids == std::vector<int64_t>{0, 1, 1, 0});
  CHECK(t.line_numbers == std::vector<int64_t>{2, 4, 6, 7});
  CHECK(t.text_a == std::vector<std::string>{"row 0", "row 2", "row 4", "row 5"});
}

TEST_CASE("a megabyte label is cut in the message") {
  const std::string huge(1 << 20, 'x');
  const std::string message = label_error({"0", "1", "1", huge}, label_options());
  CHECK(message.size() < 600);
  CHECK(message.rfind("train.tsv:5: label '" + std::string(60, 'x') + "... (1048516 more bytes)' is not an integer", 0) ==
        0);
}
