// Private to src/checkpoint: moving flat element ranges of a row-major dataset
// between memory and the file. The range [begin, end) of a tensor of any rank
// is selected as a few hyperslab boxes, and a rank's ranges of one dataset go
// in one collective H5Dread or H5Dwrite.
//
//   detail::PropertyList dxpl = detail::collective_transfer();
//   std::string problem = detail::transfer(/*writing=*/true, dataset, shape, dtype,
//                                          {{begin, count}}, data, dxpl.get(), path);
//   throw_if_any_failed(problem, comm, phase);  // every rank throws alike
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/hdf5_handles.h"

namespace shardtrain {
namespace detail {

// The dataspace of a dataset of `shape` ({}: a scalar).
Dataspace make_file_space(const std::vector<int64_t>& shape);

// Adds the flat element range [begin, end) of the row-major dataspace `space`
// of `shape` to its selection: replaces the selection when *first, then sets
// *first to false. At most 2 * rank - 1 boxes.
void select_flat_range(hid_t space, const std::vector<int64_t>& shape, int64_t begin, int64_t end, bool* first);

// A dataset transfer property list for collective MPI-IO.
PropertyList collective_transfer();

// One collective H5Dread or H5Dwrite of this rank's ranges of a dataset of
// `shape` and `dtype` (a code of checkpoint/dtypes.h); no ranges: an empty
// selection, so the rank still joins. `ranges` are (begin, count) sorted by
// begin, disjoint; `buffer` holds their elements back to back. Returns "" or
// why it failed (the OS's reason where there is one, asking the file system
// about `file_path` when writing); the caller agrees on failure with the other
// ranks (throw_if_any_failed), so every rank throws alike.
std::string transfer(bool writing, hid_t dataset, const std::vector<int64_t>& shape, int dtype,
                     const std::vector<std::pair<int64_t, int64_t>>& ranges, void* buffer, hid_t dxpl,
                     const std::string& file_path);

}  // namespace detail
}  // namespace shardtrain
