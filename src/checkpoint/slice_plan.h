// Private to src/checkpoint: how the ranks agree on one group before any I/O
// (docs/DESIGN.md, "Checkpoints"). Every rank sends the slices it writes or
// asks for as SliceRecords; every rank gets all of them, groups them by tensor
// and checks them alike, so that a bad slice throws an Error on every rank
// before a collective write or read starts.
//
//   std::map<std::string, TensorPlan> plans = detail::plan_group(
//       detail::exchange_records(mine, comm, phase), where, /*require_exact_cover=*/true);
//   for (const auto& [name, plan] : plans) ...  // the same order on every rank
#pragma once

#include <mpi.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint_format.h"
#include "shardtrain/checkpoint/checkpoint.h"
#include "shardtrain/core/text.h"

namespace shardtrain {
namespace detail {

int64_t numel_of(const std::vector<int64_t>& shape);

// One tensor of a group: its agreed shape and dtype, and every rank's ranges.
struct TensorPlan {
  std::vector<int64_t> shape;
  int dtype = 0;
  std::vector<SliceRecord> records;
};

// What `rank` sends of its `slice`. Error naming `where` (the group) for a
// dtype a checkpoint cannot hold.
SliceRecord record_of(const TensorSlice& slice, int rank, const std::string& where);

// Allgather of every rank's slice metadata (names, shapes, ranges), so that all
// ranks agree on which datasets exist and validate them identically.
std::vector<SliceRecord> exchange_records(const std::vector<SliceRecord>& mine, MPI_Comm comm,
                                          const std::string& phase);

// Groups the records by tensor name (sorted, so every rank visits datasets in
// the same order) and checks what can be checked without the file: the ranks
// agree on each tensor's shape and dtype, every slice lies inside its tensor,
// and either the slices cover each tensor exactly once (require_exact_cover: a
// write) or no rank's own slices of a tensor overlap (a read). `where` names
// the group for messages.
std::map<std::string, TensorPlan> plan_group(const std::vector<SliceRecord>& records, const std::string& where,
                                             bool require_exact_cover);

// The flat ranges of [0, numel) that `records` do not cover, as (begin, count), sorted.
std::vector<std::pair<int64_t, int64_t>> uncovered(const std::vector<SliceRecord>& records, int64_t numel);

// The parts of [begin, begin + count) that no record of a rank below `rank`
// covers: the elements whose checksum terms `rank` adds, so that each element
// of a dataset read by several ranks is counted once. Sorted (begin, count).
std::vector<std::pair<int64_t, int64_t>> first_claims(const std::vector<SliceRecord>& records, int rank,
                                                      int64_t begin, int64_t count);

}  // namespace detail
}  // namespace shardtrain
