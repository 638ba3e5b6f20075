#include "checkpoint/slice_plan.h"

#include <algorithm>

#include "checkpoint/dtypes.h"
#include "shardtrain/comm/mpi_helpers.h"
#include "shardtrain/core/check.h"

namespace shardtrain {
namespace detail {

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SliceRecord record_of(const TensorSlice& slice, int rank, const std::string& where) {
  SliceRecord record;
  record.rank = rank;
  record.name = slice.name;
  record.dtype = dtype_code(slice.data.scalar_type(), where + "/" + slice.name);
  record.shape = slice.shape;
  record.begin = slice.begin;
  record.count = slice.data.numel();
  return record;
}

std::vector<SliceRecord> exchange_records(const std::vector<SliceRecord>& mine, MPI_Comm comm,
                                          const std::string& phase) {
  const std::vector<std::string> all = all_gather_strings(encode_slice_records(mine), comm, phase);
  std::vector<SliceRecord> records;
  for (int rank = 0; rank < static_cast<int>(all.size()); ++rank)
    for (SliceRecord& r : decode_slice_records(all[static_cast<size_t>(rank)], rank)) records.push_back(std::move(r));
  return records;
}

std::map<std::string, TensorPlan> plan_group(const std::vector<SliceRecord>& records, const std::string& where,
                                             bool require_exact_cover) {
  const auto& table = dtype_table();
  std::map<std::string, TensorPlan> plans;
  for (const auto& r : records) {
    auto found = plans.find(r.name);
    if (found == plans.end()) {
      plans[r.name] = TensorPlan{r.shape, r.dtype, {r}};
      continue;
    }
    TensorPlan& plan = found->second;
    const SliceRecord& first = plan.records.front();
    if (plan.shape != r.shape || plan.dtype != r.dtype)
      throw Error(where + "/" + r.name + ": ranks disagree on the tensor: rank " + std::to_string(first.rank) +
                  " has " + table[first.dtype].name + " " + shape_text(first.shape) + ", rank " +
                  std::to_string(r.rank) + " has " + table[r.dtype].name + " " + shape_text(r.shape));
    plan.records.push_back(r);
  }
  for (auto& [name, plan] : plans) {
    const int64_t numel = numel_of(plan.shape);
    for (const auto& r : plan.records) {
      if (r.begin < 0 || r.count < 0 || r.begin + r.count > numel)
        throw Error(where + "/" + name + ": rank " + std::to_string(r.rank) + "'s slice [" +
                    std::to_string(r.begin) + ", " + std::to_string(r.begin + r.count) +
                    ") is outside the tensor's " + std::to_string(numel) + " elements (shape " +
                    shape_text(plan.shape) + ")");
    }
    // Sorted by (begin, rank): overlap checks need neighbours in flat order.
    std::vector<SliceRecord> sorted = plan.records;
    std::sort(sorted.begin(), sorted.end(), [](const SliceRecord& a, const SliceRecord& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.rank < b.rank;
    });
    if (require_exact_cover) {
      int64_t next = 0;
      for (const auto& r : sorted) {
        if (r.count == 0) continue;
        if (r.begin != next)
          throw Error(where + "/" + name + ": the ranks' slices " +
                      (r.begin > next ? "leave elements [" + std::to_string(next) + ", " + std::to_string(r.begin) +
                                            ") unwritten"
                                      : "overlap at element " + std::to_string(r.begin) + " (rank " +
                                            std::to_string(r.rank) + ")"));
        next = r.begin + r.count;
      }
      if (next != numel)
        throw Error(where + "/" + name + ": the ranks' slices leave elements [" + std::to_string(next) + ", " +
                    std::to_string(numel) + ") unwritten");
    } else {
      std::map<int, int64_t> end_by_rank;
      for (const auto& r : sorted) {
        if (r.count == 0) continue;
        auto it = end_by_rank.find(r.rank);
        if (it != end_by_rank.end() && r.begin < it->second)
          throw Error(where + "/" + name + ": rank " + std::to_string(r.rank) +
                      " requests overlapping slices at element " + std::to_string(r.begin));
        end_by_rank[r.rank] = r.begin + r.count;
      }
    }
  }
  return plans;
}

std::vector<std::pair<int64_t, int64_t>> uncovered(const std::vector<SliceRecord>& records, int64_t numel) {
  std::vector<std::pair<int64_t, int64_t>> covered;
  for (const auto& r : records)
    if (r.count > 0) covered.emplace_back(r.begin, r.begin + r.count);
  std::sort(covered.begin(), covered.end());
  std::vector<std::pair<int64_t, int64_t>> gaps;
  int64_t next = 0;
  for (const auto& [begin, end] : covered) {
    if (begin > next) gaps.emplace_back(next, begin - next);
    next = std::max(next, end);
  }
  if (next < numel) gaps.emplace_back(next, numel - next);
  return gaps;
}

std::vector<std::pair<int64_t, int64_t>> first_claims(const std::vector<SliceRecord>& records, int rank,
                                                      int64_t begin, int64_t count) {
  std::vector<std::pair<int64_t, int64_t>> lower;
  for (const auto& r : records)
    if (r.rank < rank && r.count > 0) lower.emplace_back(r.begin, r.begin + r.count);
  std::sort(lower.begin(), lower.end());
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t position = begin;
  const int64_t end = begin + count;
  for (const auto& [b, e] : lower) {
    if (e <= position) continue;
    if (b >= end) break;
    if (b > position) out.emplace_back(position, b - position);
    position = std::max(position, e);
    if (position >= end) break;
  }
  if (position < end) out.emplace_back(position, end - position);
  return out;
}

}  // namespace detail
}  // namespace shardtrain
