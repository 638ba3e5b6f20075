// TokenizedDataset: a RawTable after tokenization, stored compactly.
//
// All token ids live in one flat int32 array with int64 row offsets (row i is
// input_ids[offsets[i] .. offsets[i+1])), token types in a parallel flat uint8
// array, labels in one vector. No per-row string or vector survives
// tokenization, so an epoch touches a few contiguous arrays.
//
// build_dataset tokenizes once per run. Each rank of `comm` tokenizes a
// contiguous slice of the rows (optionally with several threads, each on a
// contiguous sub-slice) and MPI_Allgatherv assembles the full dataset on every
// rank, rows in input order. The encoder is any callable
//   EncodedRow encode(std::string_view text_a, std::optional<std::string_view> text_b)
// and must be safe to call from several threads when num_threads > 1
// (Tokenizer::encode is const). make_encoder() adapts a tokenizer:
//
//   Tokenizer tokenizer = ...;
//   TokenizedDataset train = build_dataset(table, make_encoder(tokenizer, 128), world.comm());
//
// If encoding throws on any rank, every rank throws shardtrain::Error (the
// failing rank with the encoder's message, naming file and line); no rank is
// left waiting in the gather.
#pragma once

#include <mpi.h>

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shardtrain/data/reader.h"

namespace shardtrain {

// One encoded sequence: [CLS] A [SEP] (B [SEP]) ids and their segment ids,
// and what the task labels in it.
struct EncodedRow {
  std::vector<int32_t> input_ids;
  std::vector<uint8_t> token_type_ids;
  // Token classification: one label per token (kIgnoreLabel where no label
  // applies: special tokens, later sub-words); empty otherwise.
  std::vector<int32_t> token_labels;
  // Extractive QA: the answer's first and last token, or both the CLS
  // position when the sequence does not hold it; {-1, -1} otherwise.
  std::array<int32_t, 2> span{-1, -1};
  // Extractive QA: each token's [begin, end) character span in its source
  // text (the context), or {-1, -1} outside it; empty otherwise.
  std::vector<std::array<int32_t, 2>> token_spans;
};

// The label of a token that takes no part in the loss or the metrics (HF's -100).
inline constexpr int32_t kIgnoreLabel = -100;

using EncodeFn = std::function<EncodedRow(std::string_view, std::optional<std::string_view>)>;

// Wraps anything with `encode(text_a, optional text_b, max_length)` returning a
// value with `input_ids` and `token_type_ids` (shardtrain's Tokenizer). The
// tokenizer must outlive the returned function.
template <class TokenizerT>
EncodeFn make_encoder(const TokenizerT& tokenizer, int max_length) {
  return [&tokenizer, max_length](std::string_view a, std::optional<std::string_view> b) {
    auto encoding = tokenizer.encode(a, b, max_length);
    EncodedRow row;
    row.input_ids.assign(encoding.input_ids.begin(), encoding.input_ids.end());
    row.token_type_ids.assign(encoding.token_type_ids.begin(), encoding.token_type_ids.end());
    return row;
  };
}

// A tokenized data set: examples of one or more sequences each.
//
// Sequence s is input_ids[offsets[s] .. offsets[s+1]); example e is the
// sequences [e * sequences_per_example, (e+1) * sequences_per_example)
// (multiple choice: one sequence per choice; every other task: one). An
// example comes from source row source_rows[e] of its table; a row may give
// several examples (extractive QA: one per window of a long context) or one.
struct TokenizedDataset {
  std::vector<int32_t> input_ids;       // all sequences, concatenated
  std::vector<uint8_t> token_type_ids;  // parallel to input_ids
  std::vector<int64_t> offsets;         // num_sequences() + 1 entries, offsets[0] = 0
  int64_t sequences_per_example = 1;
  Labels labels;                        // per example (copied from the table's rows)
  std::vector<int32_t> token_labels;    // parallel to input_ids, or empty (EncodedRow::token_labels)
  std::vector<int32_t> span_labels;     // 2 per sequence, or empty (EncodedRow::span)
  std::vector<int32_t> token_spans;     // 2 per token, or empty (EncodedRow::token_spans)
  std::vector<int64_t> source_rows;     // per example: the table row it came from

  int64_t num_sequences() const { return offsets.empty() ? 0 : static_cast<int64_t>(offsets.size()) - 1; }
  int64_t size() const { return num_sequences() / sequences_per_example; }
  int64_t sequence_length(int64_t sequence) const { return offsets[sequence + 1] - offsets[sequence]; }
  const int32_t* ids(int64_t sequence) const { return input_ids.data() + offsets[sequence]; }
  const uint8_t* types(int64_t sequence) const { return token_type_ids.data() + offsets[sequence]; }
  // The longest sequence of example `example` (what it pads a batch to).
  int64_t length(int64_t example) const;
  // The tokens of example `example`, all its sequences.
  int64_t num_example_tokens(int64_t example) const;
  int64_t num_tokens() const { return static_cast<int64_t>(input_ids.size()); }
  // length() of every example (for length bucketing).
  std::vector<int64_t> lengths() const;
};

struct BuildOptions {
  int num_threads = 1;  // threads per rank; <= 0 means 1
};

// Tokenizes `table` across the ranks of `comm` (MPI_COMM_NULL or MPI_COMM_SELF
// = this process alone). Collective over `comm`: every rank must call it with
// the same table. Returns the full dataset on every rank.
TokenizedDataset build_dataset(const RawTable& table, const EncodeFn& encode, MPI_Comm comm,
                               const BuildOptions& options = {});

// The general form, for tasks whose rows are not (text_a, text_b) pairs:
// encode(row, out) appends row `row`'s sequences to `out` (any multiple of
// sequences_per_example: none drops the row, several make several examples).
// `source` and line_numbers[row] name a row in errors (encode's exceptions
// become "source:line: ..."). Collective over comm, rows sliced over the
// ranks as build_dataset does; the result (labels left empty) is the same on
// every rank, examples in row order.
using RowEncodeFn = std::function<void(int64_t row, std::vector<EncodedRow>& out)>;
TokenizedDataset build_examples(int64_t num_rows, const RowEncodeFn& encode, int64_t sequences_per_example,
                                const std::string& source, const std::vector<int64_t>& line_numbers, MPI_Comm comm,
                                const BuildOptions& options = {});

// The table's labels of the dataset's examples (by source_rows).
Labels labels_of_examples(const Labels& table_labels, const std::vector<int64_t>& source_rows);

// The contiguous row range [begin, end) that `rank` of `world_size` tokenizes.
std::pair<int64_t, int64_t> row_slice(int64_t num_rows, int rank, int world_size);

}  // namespace shardtrain
