// Extractive QA features, as transformers' run_qa.py builds them
// (prepare_train_features / prepare_validation_features; docs/DESIGN.md,
// "Question answering"):
//   - the question, left-stripped, goes first, the context second;
//   - a context longer than the window (max_length minus the question and the
//     template's special tokens) is cut into windows that overlap by
//     doc_stride tokens (HF's only_second truncation with
//     return_overflowing_tokens: window w starts at w * (budget - doc_stride);
//     the last ends at the context's end; with a left-truncating tokenizer
//     they are laid from the end, as tokenizers does);
//   - one feature (sequence) per window; every feature of question q has
//     source_rows = q, in window order;
//   - span_labels: the first answer's start and end token, or both the CLS
//     position when the window does not hold the whole answer or there is
//     none (v2). One deviation: when the answer starts in the window's last
//     context token, HF's loop walks on past the context (the label lands on
//     [SEP] or padding); here it is that last context token;
//   - token_spans (with_offsets): each context token's character span
//     [begin, end) in the context (HF's offset_mapping converted from the
//     tokenizer's bytes to Python's code-point indices), {-1, -1} for the
//     question and the special tokens.
//
//   QaFeatureOptions options;   // 384 / 128
//   TokenizedDataset features = build_qa_features(table, tokenizer, options, comm);
//   features.size()             // >= table.size(): one per window
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "shardtrain/data/dataset.h"
#include "shardtrain/data/qa_data.h"
#include "shardtrain/data/tokenizer.h"

namespace shardtrain {

struct QaFeatureOptions {
  int max_length = 384;  // data.max_length
  int doc_stride = 128;  // data.doc_stride
  bool with_offsets = true;  // fill token_spans (evaluation, predict); training does not need them
  bool with_labels = true;   // fill span_labels from the answers (the table has answers)
};

// The features of one question (its windows), exactly as build_qa_features
// makes them; `where` names the question in errors.
std::vector<EncodedRow> qa_question_features(const QaExample& example, const Tokenizer& tokenizer,
                                             const QaFeatureOptions& options);

// Collective over comm: every question's features, in question order, the
// same on every rank (questions sliced over the ranks, as build_dataset does).
// span_labels are filled when the table has answers. Errors name the file and
// the question id.
TokenizedDataset build_qa_features(const QaTable& table, const Tokenizer& tokenizer, const QaFeatureOptions& options,
                                   MPI_Comm comm, const BuildOptions& build = {});

// For each question, its features [first[q], first[q + 1]) (source_rows are
// sorted): first has table.size() + 1 entries.
std::vector<int64_t> features_per_question(const TokenizedDataset& features, int64_t num_questions);

}  // namespace shardtrain
