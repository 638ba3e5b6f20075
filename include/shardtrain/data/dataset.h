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

#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

#include "shardtrain/data/reader.h"

namespace shardtrain {

// One encoded row: [CLS] A [SEP] (B [SEP]) ids and their segment ids.
struct EncodedRow {
  std::vector<int32_t> input_ids;
  std::vector<uint8_t> token_type_ids;
};

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

struct TokenizedDataset {
  std::vector<int32_t> input_ids;       // all rows, concatenated
  std::vector<uint8_t> token_type_ids;  // parallel to input_ids
  std::vector<int64_t> offsets;         // size() + 1 entries, offsets[0] = 0
  Labels labels;                        // copied from the table

  int64_t size() const { return offsets.empty() ? 0 : static_cast<int64_t>(offsets.size()) - 1; }
  int64_t length(int64_t row) const { return offsets[row + 1] - offsets[row]; }
  const int32_t* ids(int64_t row) const { return input_ids.data() + offsets[row]; }
  const uint8_t* types(int64_t row) const { return token_type_ids.data() + offsets[row]; }
  int64_t num_tokens() const { return static_cast<int64_t>(input_ids.size()); }
  // Token counts per row (for length bucketing).
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

// The contiguous row range [begin, end) that `rank` of `world_size` tokenizes.
std::pair<int64_t, int64_t> row_slice(int64_t num_rows, int rank, int world_size);

}  // namespace shardtrain
