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

std::vector<int64_t> TokenizedDataset::lengths() const {
  std::vector<int64_t> result(size());
  for (int64_t i = 0; i < size(); ++i) result[i] = length(i);
  return result;
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
  std::vector<int64_t> lengths;
  std::string error;  // first failure, already prefixed with file:line
};

void encode_rows(const RawTable& table, const EncodeFn& encode, int64_t begin, int64_t end, Piece& out) {
  for (int64_t row = begin; row < end; ++row) {
    try {
      std::optional<std::string_view> b;
      if (table.has_text_b) b = std::string_view(table.text_b[row]);
      EncodedRow encoded = encode(table.text_a[row], b);
      if (encoded.input_ids.size() != encoded.token_type_ids.size())
        throw Error(str_format("encoder returned %zu ids but %zu token types", encoded.input_ids.size(),
                               encoded.token_type_ids.size()));
      out.ids.insert(out.ids.end(), encoded.input_ids.begin(), encoded.input_ids.end());
      out.types.insert(out.types.end(), encoded.token_type_ids.begin(), encoded.token_type_ids.end());
      out.lengths.push_back(static_cast<int64_t>(encoded.input_ids.size()));
    } catch (const std::exception& e) {
      out.error = str_format("%s:%lld: tokenization failed: %s", table.path.c_str(),
                             static_cast<long long>(table.line_numbers[row]), e.what());
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

}  // namespace

TokenizedDataset build_dataset(const RawTable& table, const EncodeFn& encode, MPI_Comm comm,
                               const BuildOptions& options) {
  int rank = 0, world_size = 1;
  if (comm != MPI_COMM_NULL) {
    ST_CHECK_MPI(MPI_Comm_rank(comm, &rank));
    ST_CHECK_MPI(MPI_Comm_size(comm, &world_size));
  }
  const int64_t num_rows = table.size();
  auto [begin, end] = row_slice(num_rows, rank, world_size);

  const int num_threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(options.num_threads, end - begin)));
  std::vector<Piece> pieces(num_threads);
  if (num_threads == 1) {
    encode_rows(table, encode, begin, end, pieces[0]);
  } else {
    std::vector<std::thread> threads;
    for (int t = 0; t < num_threads; ++t) {
      auto [b, e] = row_slice(end - begin, t, num_threads);
      threads.emplace_back([&, t, b = b, e = e] { encode_rows(table, encode, begin + b, begin + e, pieces[t]); });
    }
    for (auto& thread : threads) thread.join();
  }

  Piece local = std::move(pieces[0]);
  for (int t = 1; t < num_threads && local.error.empty(); ++t) {
    if (!pieces[t].error.empty()) { local.error = pieces[t].error; break; }
    local.ids.insert(local.ids.end(), pieces[t].ids.begin(), pieces[t].ids.end());
    local.types.insert(local.types.end(), pieces[t].types.begin(), pieces[t].types.end());
    local.lengths.insert(local.lengths.end(), pieces[t].lengths.begin(), pieces[t].lengths.end());
  }

  // Agree on failure before any gather, so a failing rank cannot strand the others.
  int failed = local.error.empty() ? 0 : 1, any_failed = failed;
  if (world_size > 1) {
    PhaseGuard guard(comm, "tokenizing " + table.path + ": agreeing on errors");
    ST_CHECK_MPI(MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, comm));
  }
  if (failed) throw Error(local.error);
  if (any_failed) throw Error(table.path + ": tokenization failed on another rank (its message names the row)");

  TokenizedDataset dataset;
  dataset.labels = table.labels;
  if (world_size == 1) {
    dataset.input_ids = std::move(local.ids);
    dataset.token_type_ids = std::move(local.types);
  } else {
    PhaseGuard guard(comm, "tokenizing " + table.path + ": gathering the tokens of every rank");
    std::vector<int> row_counts(world_size), row_displs(world_size);
    for (int r = 0; r < world_size; ++r) {
      auto [rb, re] = row_slice(num_rows, r, world_size);
      row_counts[r] = checked_int(re - rb, "rows");
      row_displs[r] = checked_int(rb, "rows");
    }
    std::vector<int64_t> all_lengths(num_rows);
    ST_CHECK_MPI(MPI_Allgatherv(local.lengths.data(), row_counts[rank], MPI_INT64_T, all_lengths.data(),
                                row_counts.data(), row_displs.data(), MPI_INT64_T, comm));
    std::vector<int> token_counts(world_size), token_displs(world_size);
    int64_t total = 0;
    for (int r = 0; r < world_size; ++r) {
      int64_t count = 0;
      for (int i = 0; i < row_counts[r]; ++i) count += all_lengths[row_displs[r] + i];
      token_counts[r] = checked_int(count, "tokens per rank");
      token_displs[r] = checked_int(total, "token offset");
      total += count;
    }
    ST_ASSERT(static_cast<int64_t>(local.ids.size()) == token_counts[rank], "local token count mismatch");
    dataset.input_ids.resize(total);
    dataset.token_type_ids.resize(total);
    ST_CHECK_MPI(MPI_Allgatherv(local.ids.data(), token_counts[rank], MPI_INT32_T, dataset.input_ids.data(),
                                token_counts.data(), token_displs.data(), MPI_INT32_T, comm));
    ST_CHECK_MPI(MPI_Allgatherv(local.types.data(), token_counts[rank], MPI_UINT8_T, dataset.token_type_ids.data(),
                                token_counts.data(), token_displs.data(), MPI_UINT8_T, comm));
    local.lengths = std::move(all_lengths);
  }
  dataset.offsets.resize(num_rows + 1);
  dataset.offsets[0] = 0;
  for (int64_t i = 0; i < num_rows; ++i) dataset.offsets[i + 1] = dataset.offsets[i] + local.lengths[i];
  ST_ASSERT(dataset.offsets[num_rows] == static_cast<int64_t>(dataset.input_ids.size()), "offsets/ids mismatch");
  return dataset;
}

}  // namespace shardtrain
