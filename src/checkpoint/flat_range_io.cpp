#include "checkpoint/flat_range_io.h"

#include <algorithm>
#include <cerrno>

#include "checkpoint/dtypes.h"
#include "shardtrain/core/check.h"

namespace shardtrain {
namespace detail {

Dataspace make_file_space(const std::vector<int64_t>& shape) {
  if (shape.empty()) return Dataspace(ST_CHECK_HDF5(H5Screate(H5S_SCALAR)));
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  return Dataspace(ST_CHECK_HDF5(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)));
}

// A union of boxes, greedy from `begin`: take the largest block (a run along
// the outermost possible dimension) that starts aligned and fits. That gives
// partial innermost rows up to an aligned start, whole blocks, then partial
// rows down to `end`.
void select_flat_range(hid_t space, const std::vector<int64_t>& shape, int64_t begin, int64_t end, bool* first) {
  const size_t rank = shape.size();
  if (rank == 0) {
    ST_CHECK_HDF5(H5Sselect_all(space));
    *first = false;
    return;
  }
  std::vector<int64_t> stride(rank, 1);
  for (size_t k = rank - 1; k > 0; --k) stride[k - 1] = stride[k] * shape[k];
  std::vector<hsize_t> start(rank), count(rank);
  int64_t position = begin;
  while (position < end) {
    size_t dim = rank - 1;
    for (size_t k = 0; k < rank; ++k) {
      if (position % stride[k] == 0 && position + stride[k] <= end) {
        dim = k;
        break;
      }
    }
    int64_t remainder = position;
    for (size_t k = 0; k < rank; ++k) {
      start[k] = static_cast<hsize_t>(remainder / stride[k]);
      remainder %= stride[k];
    }
    const int64_t room_in_dim = shape[dim] - static_cast<int64_t>(start[dim]);
    const int64_t steps = std::min((end - position) / stride[dim], room_in_dim);
    for (size_t k = 0; k < rank; ++k)
      count[k] = k < dim ? 1 : (k == dim ? static_cast<hsize_t>(steps) : static_cast<hsize_t>(shape[k]));
    ST_CHECK_HDF5(H5Sselect_hyperslab(space, *first ? H5S_SELECT_SET : H5S_SELECT_OR, start.data(), nullptr,
                                      count.data(), nullptr));
    *first = false;
    position += steps * stride[dim];
  }
}

PropertyList collective_transfer() {
  PropertyList dxpl(ST_CHECK_HDF5(H5Pcreate(H5P_DATASET_XFER)));
  ST_CHECK_HDF5(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE));
  return dxpl;
}

std::string transfer(bool writing, hid_t dataset, const std::vector<int64_t>& shape, int dtype,
                     const std::vector<std::pair<int64_t, int64_t>>& ranges, void* buffer, hid_t dxpl,
                     const std::string& file_path) {
  Dataspace file_space = make_file_space(shape);
  int64_t total = 0;
  bool first = true;
  for (const auto& [begin, count] : ranges) {
    if (count == 0) continue;
    select_flat_range(file_space.get(), shape, begin, begin + count, &first);
    total += count;
  }
  hsize_t memory_length = static_cast<hsize_t>(std::max<int64_t>(total, 1));
  Dataspace memory_space(ST_CHECK_HDF5(H5Screate_simple(1, &memory_length, nullptr)));
  static char dummy[8];
  if (total == 0) {
    ST_CHECK_HDF5(H5Sselect_none(file_space.get()));
    ST_CHECK_HDF5(H5Sselect_none(memory_space.get()));
    buffer = dummy;
  }
  hid_t memory_type = dtype_table()[dtype].memory_type;
  errno = 0;
  const herr_t status = writing ? H5Dwrite(dataset, memory_type, memory_space.get(), file_space.get(), dxpl, buffer)
                                : H5Dread(dataset, memory_type, memory_space.get(), file_space.get(), dxpl, buffer);
  return status < 0 ? io_failure_reason(errno, writing ? file_path : std::string()) : std::string();
}

}  // namespace detail
}  // namespace shardtrain
