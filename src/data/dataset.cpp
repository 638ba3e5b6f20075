#include "shardtrain/data/dataset.h"

#include <algorithm>
#include <climits>
#include <exception>
#include <string>
#include <thread>

#include "shardtrain/comm/watchdog.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain {

int64_t TokenizedDataset::length(int64_t example) const {
  int64_t longest = 0;
  for (int64_t k = 0; k < sequences_per_example; ++k)
    longest = std::max(longest, sequence_length(example * sequences_per_example + k));
  return longest;
}

int64_t TokenizedDataset::num_example_tokens(int64_t example) const {
  return offsets[(example + 1) * sequences_per_example] - offsets[example * sequences_per_example];
}

std::vector<int64_t> TokenizedDataset::lengths() const {
  std::vector<int64_t> result(size());
  for (int64_t i = 0; i < size(); ++i) result[i] = length(i);
  return result;
}

Labels labels_of_examples(const Labels& table_labels, const std::vector<int64_t>& source_rows) {
  Labels out;
  out.kind = table_labels.kind;
  out.names = table_labels.names;
  for (int64_t row : source_rows) {
    if (table_labels.kind == LabelKind::kClass) out.class_ids.push_back(table_labels.class_ids[row]);
    if (table_labels.kind == LabelKind::kRegression) out.values.push_back(table_labels.values[row]);
  }
  return out;
}

std::pair<int64_t, int64_t> row_slice(int64_t num_rows, int rank, int world_size) {
  // Balanced to within one row; the first num_rows % world_size ranks get the extra.
  int64_t base = num_rows / world_size, extra = num_rows % world_size;
  int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

namespace {

// What one thread (or one rank) produced for its contiguous rows.
struct Piece {
  std::vector<int32_t> ids;
  std::vector<uint8_t> types;
  std::vector<int32_t> token_labels;
  std::vector<int32_t> token_spans;
  std::vector<int64_t> lengths;        // per sequence
  std::vector<int32_t> spans;          // 2 per sequence
  std::vector<int64_t> row_sequences;  // per row: its number of sequences
  std::string error;                   // first failure, already prefixed with file:line
  bool any_token_labels = false, any_spans = false, any_token_spans = false;

  void append(Piece&& other) {
    auto cat = [](auto& to, auto& from) { to.insert(to.end(), from.begin(), from.end()); };
    cat(ids, other.ids);
    cat(types, other.types);
    cat(token_labels, other.token_labels);
    cat(token_spans, other.token_spans);
    cat(lengths, other.lengths);
    cat(spans, other.spans);
    cat(row_sequences, other.row_sequences);
    any_token_labels |= other.any_token_labels;
    any_spans |= other.any_spans;
    any_token_spans |= other.any_token_spans;
  }
};

void encode_rows(const RowEncodeFn& encode, int64_t sequences_per_example, const std::string& source,
                 const std::vector<int64_t>& line_numbers, int64_t begin, int64_t end, Piece& out) {
  std::vector<EncodedRow> sequences;
  for (int64_t row = begin; row < end; ++row) {
    try {
      sequences.clear();
      encode(row, sequences);
      if (static_cast<int64_t>(sequences.size()) % sequences_per_example != 0)
        throw Error(str_format("%zu sequences, not a multiple of the %lld an example has", sequences.size(),
                               static_cast<long long>(sequences_per_example)));
      for (EncodedRow& encoded : sequences) {
        const size_t n = encoded.input_ids.size();
        if (n != encoded.token_type_ids.size())
          throw Error(str_format("encoder returned %zu ids but %zu token types", n, encoded.token_type_ids.size()));
        if (!encoded.token_labels.empty() && encoded.token_labels.size() != n)
          throw Error(str_format("encoder returned %zu ids but %zu token labels", n, encoded.token_labels.size()));
        if (!encoded.token_spans.empty() && encoded.token_spans.size() != n)
          throw Error(str_format("encoder returned %zu ids but %zu token spans", n, encoded.token_spans.size()));
        out.ids.insert(out.ids.end(), encoded.input_ids.begin(), encoded.input_ids.end());
        out.types.insert(out.types.end(), encoded.token_type_ids.begin(), encoded.token_type_ids.end());
        out.any_token_labels |= !encoded.token_labels.empty();
        if (encoded.token_labels.empty()) encoded.token_labels.assign(n, kIgnoreLabel);
        out.token_labels.insert(out.token_labels.end(), encoded.token_labels.begin(), encoded.token_labels.end());
        out.any_token_spans |= !encoded.token_spans.empty();
        if (encoded.token_spans.empty()) encoded.token_spans.assign(n, {-1, -1});
        for (const auto& span : encoded.token_spans) out.token_spans.insert(out.token_spans.end(), span.begin(), span.end());
        out.any_spans |= encoded.span[0] >= 0;
        out.spans.insert(out.spans.end(), encoded.span.begin(), encoded.span.end());
        out.lengths.push_back(static_cast<int64_t>(n));
      }
      out.row_sequences.push_back(static_cast<int64_t>(sequences.size()));
    } catch (const std::exception& e) {
      const long long line = row < static_cast<int64_t>(line_numbers.size()) ? line_numbers[row] : row + 1;
      out.error = str_format("%s:%lld: %s", source.c_str(), line, e.what());
      return;
    }
  }
}

int checked_int(int64_t value, const char* what) {
  // MPI counts are int; datasets beyond 2^31 tokens need the large-count API.
  if (value > INT_MAX) throw Error(str_format("dataset too large for one MPI gather: %s = %lld", what,
                                              static_cast<long long>(value)));
  return static_cast<int>(value);
}

// Every rank's `local` (count[rank] elements) gathered in rank order.
template <class T>
std::vector<T> allgather(const std::vector<T>& local, const std::vector<int64_t>& counts, MPI_Datatype type,
                         MPI_Comm comm, int rank) {
  std::vector<int> c(counts.size()), d(counts.size());
  int64_t total = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    c[r] = checked_int(counts[r], "elements per rank");
    d[r] = checked_int(total, "element offset");
    total += counts[r];
  }
  ST_ASSERT(static_cast<int64_t>(local.size()) == counts[static_cast<size_t>(rank)], "local count mismatch");
  std::vector<T> out(static_cast<size_t>(total));
  ST_CHECK_MPI(MPI_Allgatherv(local.data(), c[static_cast<size_t>(rank)], type, out.data(), c.data(), d.data(), type,
                              comm));
  return out;
}

}  // namespace

TokenizedDataset build_examples(int64_t num_rows, const RowEncodeFn& encode, int64_t sequences_per_example,
                                const std::string& source, const std::vector<int64_t>& line_numbers, MPI_Comm comm,
                                const BuildOptions& options) {
  ST_ASSERT(sequences_per_example >= 1, "build_examples: sequences_per_example must be >= 1");
  int rank = 0, world_size = 1;
  if (comm != MPI_COMM_NULL) {
    ST_CHECK_MPI(MPI_Comm_rank(comm, &rank));
    ST_CHECK_MPI(MPI_Comm_size(comm, &world_size));
  }
  auto [begin, end] = row_slice(num_rows, rank, world_size);

  const int num_threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(options.num_threads, end - begin)));
  std::vector<Piece> pieces(num_threads);
  if (num_threads == 1) {
    encode_rows(encode, sequences_per_example, source, line_numbers, begin, end, pieces[0]);
  } else {
    std::vector<std::thread> threads;
    for (int t = 0; t < num_threads; ++t) {
      auto [b, e] = row_slice(end - begin, t, num_threads);
      threads.emplace_back([&, t, b = b, e = e] {
        encode_rows(encode, sequences_per_example, source, line_numbers, begin + b, begin + e, pieces[t]);
      });
    }
    for (auto& thread : threads) thread.join();
  }

  Piece local = std::move(pieces[0]);
  for (int t = 1; t < num_threads && local.error.empty(); ++t) {
    if (!pieces[t].error.empty()) { local.error = pieces[t].error; break; }
    local.append(std::move(pieces[t]));
  }

  // Agree on failure (and on which optional parts exist) before any gather,
  // so a failing rank cannot strand the others.
  int flags[4] = {local.error.empty() ? 0 : 1, local.any_token_labels, local.any_spans, local.any_token_spans};
  int all[4] = {flags[0], flags[1], flags[2], flags[3]};
  if (world_size > 1) {
    PhaseGuard guard(comm, "tokenizing " + source + ": agreeing on errors");
    ST_CHECK_MPI(MPI_Allreduce(flags, all, 4, MPI_INT, MPI_MAX, comm));
  }
  if (flags[0]) throw Error(local.error);
  if (all[0]) throw Error(source + ": tokenization failed on another rank (its message names the row)");

  TokenizedDataset dataset;
  dataset.sequences_per_example = sequences_per_example;
  std::vector<int64_t> row_sequences;
  if (world_size == 1) {
    dataset.input_ids = std::move(local.ids);
    dataset.token_type_ids = std::move(local.types);
    dataset.token_labels = std::move(local.token_labels);
    dataset.span_labels = std::move(local.spans);
    dataset.token_spans = std::move(local.token_spans);
    row_sequences = std::move(local.row_sequences);
  } else {
    PhaseGuard guard(comm, "tokenizing " + source + ": gathering the tokens of every rank");
    // Rows per rank are known to all; sequences and tokens per rank are gathered first.
    int64_t mine[2] = {static_cast<int64_t>(local.lengths.size()), static_cast<int64_t>(local.ids.size())};
    std::vector<int64_t> per_rank(2 * static_cast<size_t>(world_size));
    ST_CHECK_MPI(MPI_Allgather(mine, 2, MPI_INT64_T, per_rank.data(), 2, MPI_INT64_T, comm));
    std::vector<int64_t> rows(world_size), sequences(world_size), pairs(world_size), tokens(world_size),
        token_pairs(world_size);
    for (int r = 0; r < world_size; ++r) {
      auto [rb, re] = row_slice(num_rows, r, world_size);
      rows[r] = re - rb;
      sequences[r] = per_rank[2 * r];
      pairs[r] = 2 * sequences[r];
      tokens[r] = per_rank[2 * r + 1];
      token_pairs[r] = 2 * tokens[r];
    }
    row_sequences = allgather(local.row_sequences, rows, MPI_INT64_T, comm, rank);
    local.lengths = allgather(local.lengths, sequences, MPI_INT64_T, comm, rank);
    dataset.input_ids = allgather(local.ids, tokens, MPI_INT32_T, comm, rank);
    dataset.token_type_ids = allgather(local.types, tokens, MPI_UINT8_T, comm, rank);
    if (all[1]) dataset.token_labels = allgather(local.token_labels, tokens, MPI_INT32_T, comm, rank);
    if (all[2]) dataset.span_labels = allgather(local.spans, pairs, MPI_INT32_T, comm, rank);
    if (all[3]) dataset.token_spans = allgather(local.token_spans, token_pairs, MPI_INT32_T, comm, rank);
  }
  if (!all[1]) dataset.token_labels.clear();
  if (!all[2]) dataset.span_labels.clear();
  if (!all[3]) dataset.token_spans.clear();
  const int64_t num_sequences = static_cast<int64_t>(local.lengths.size());
  dataset.offsets.resize(num_sequences + 1);
  dataset.offsets[0] = 0;
  for (int64_t i = 0; i < num_sequences; ++i) dataset.offsets[i + 1] = dataset.offsets[i] + local.lengths[i];
  ST_ASSERT(dataset.offsets[num_sequences] == static_cast<int64_t>(dataset.input_ids.size()), "offsets/ids mismatch");
  for (int64_t row = 0; row < num_rows; ++row)
    for (int64_t e = 0; e < row_sequences[row] / sequences_per_example; ++e) dataset.source_rows.push_back(row);
  return dataset;
}

TokenizedDataset build_dataset(const RawTable& table, const EncodeFn& encode, MPI_Comm comm,
                               const BuildOptions& options) {
  const RowEncodeFn rows = [&](int64_t row, std::vector<EncodedRow>& out) {
    std::optional<std::string_view> b;
    if (table.has_text_b) b = std::string_view(table.text_b[row]);
    try {
      out.push_back(encode(table.text_a[row], b));
    } catch (const std::exception& e) {
      throw Error(std::string("tokenization failed: ") + e.what());
    }
  };
  TokenizedDataset dataset = build_examples(table.size(), rows, 1, table.path, table.line_numbers, comm, options);
  dataset.labels = table.labels;
  return dataset;
}

}  // namespace shardtrain
