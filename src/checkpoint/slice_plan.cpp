#include "checkpoint/slice_plan.h"

#include "checkpoint/dtypes.h"
#include "shardtrain/comm/mpi_helpers.h"
#include "shardtrain/core/check.h"

namespace shardtrain {
namespace detail {

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

}  // namespace detail
}  // namespace shardtrain
