// Private to src/comm: the argument checks every Communicator backend makes
// before it launches a collective (the same shapes, dtypes and counts for MPI
// and NCCL, so both refuse a bad call with the same message).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "shardtrain/comm/communicator.h"

namespace shardtrain {

// op must be one the tensor's dtype can do (averaging needs floats).
void check_reducible(const at::Tensor& t, ReduceOp op, const char* operation);
// input and output dtypes agree, and numel(big) == size * numel(small)
// (reduce-scatter: big is the input; all-gather: big is the output).
void check_even_split(const at::Tensor& input, const at::Tensor& output, int size, bool input_is_big,
                      const char* operation);
// One non-negative count per rank; the rank's own piece is `mine` and the
// whole is `whole` (reduce-scatter-v: mine = output, whole = input;
// all-gather-v the other way round). Returns the sum of the counts.
int64_t check_uneven_split(const at::Tensor& mine, const at::Tensor& whole, const std::vector<int64_t>& counts,
                           int rank, int size, const char* operation);

}  // namespace shardtrain
