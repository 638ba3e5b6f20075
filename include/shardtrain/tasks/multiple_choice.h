// Multiple choice (model.task = "multiple_choice": SWAG, COPA / XCOPA): a
// context and k choices -> the right one, as <Family>ForMultipleChoice and
// run_swag_no_trainer.py (docs/tasks.md).
//
// Files: rows of a context, an optional prefix and the choices
// (data/multiple_choice.h; data.preset names SWAG's or COPA's columns). Each
// choice of a row is the pair (context, prefix + choice) truncated
// longest_first to max_length, and one example holds the row's choices
// (sequences_per_example = k); the head scores each with one logit, and the
// logits of a row are its [k] class scores.
//
//   TokenizedDataset data = build_choice_dataset(table, tokenizer, 128, comm);
#pragma once

#include <mpi.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shardtrain/data/dataset.h"
#include "shardtrain/data/multiple_choice.h"
#include "shardtrain/data/tokenizer.h"
#include "shardtrain/tasks/task_spec.h"

namespace shardtrain {

// Collective over comm; labels are the table's right choices (or none).
TokenizedDataset build_choice_dataset(const MultipleChoiceTable& table, const Tokenizer& tokenizer, int max_length,
                                      MPI_Comm comm);

// The metrics of logits [examples x choices] against data.labels:
// eval_loss, eval_accuracy.
std::map<std::string, double> choice_metrics(const std::vector<float>& logits, const TokenizedDataset& data);

// The chance rate, 1 / choices (eval_accuracy).
Baseline chance_baseline(int64_t num_choices);

// A file of rows of choices as read.
using ChoicesTable = TableOf<MultipleChoiceTable>;

// predict's outputs: each row's logit per choice and the chosen one.
class ChoicePredictions : public TaskPredictions {
 public:
  int64_t num_choices = 0;
  std::vector<float> logits;           // row i at [i * num_choices, (i + 1) * num_choices)
  std::vector<int64_t> predicted_ids;  // the first argmax
  std::vector<int64_t> line_numbers;

  // {"row":i,"line":L,"logits":[...],"choice":k}
  std::string json_line(int64_t row) const override;
};

}  // namespace shardtrain
