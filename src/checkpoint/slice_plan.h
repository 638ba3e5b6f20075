// Private to src/checkpoint: how the ranks agree on one group before any I/O
// (docs/DESIGN.md, "Checkpoints"). Every rank sends the slices it writes or
// asks for as SliceRecords; every rank gets all of them, groups them by tensor
// and checks them alike, so that a bad slice throws an Error on every rank
// before a collective write or read starts.
//
//   std::map<std::string, TensorPlan> plans = detail::plan_group(   // checkpoint_format.h
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

namespace shardtrain {
namespace detail {

// What `rank` sends of its `slice`. Error naming `where` (the group) for a
// dtype a checkpoint cannot hold.
SliceRecord record_of(const TensorSlice& slice, int rank, const std::string& where);

// Allgather of every rank's slice metadata (names, shapes, ranges), so that all
// ranks agree on which datasets exist and validate them identically.
std::vector<SliceRecord> exchange_records(const std::vector<SliceRecord>& mine, MPI_Comm comm,
                                          const std::string& phase);

}  // namespace detail
}  // namespace shardtrain
