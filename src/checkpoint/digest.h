// Private to src/checkpoint: the per-dataset checksum ("sum-mix64-v1",
// include/shardtrain/checkpoint/checkpoint.h, "Integrity") and the finiteness
// count taken in the same pass.
//
// A dataset's checksum is the sum, modulo 2^64, of one term per element, so
// any split of its elements (between ranks, threads or chunks) gives the same
// total:
//
//   RangeDigest total;
//   for (each piece [begin, begin + count) of the dataset, in any order) {
//     const RangeDigest d = detail::digest(piece_data, dtype, begin, count);
//     total.checksum += d.checksum;
//     total.non_finite += d.non_finite;
//   }
#pragma once

#include <cstdint>
#include <string>

namespace shardtrain {
namespace detail {

// The checksum terms of some elements, and how many of them are NaN or infinite.
struct RangeDigest {
  uint64_t checksum = 0;
  int64_t non_finite = 0;
};

// The digest of elements [first_index, first_index + count) of a dataset,
// held back to back at `data` (native byte order). `dtype`: a code of
// checkpoint/dtypes.h. Runs on ATen's intra-op threads.
RangeDigest digest(const void* data, int dtype, int64_t first_index, int64_t count);

// The Error for a dataset of the file `path` whose data does not match what was written.
[[noreturn]] void checksum_mismatch(const std::string& path, const std::string& dataset, uint64_t stored,
                                    uint64_t computed);

// The Error for a dataset holding `count` NaN or infinite values.
[[noreturn]] void non_finite_values(const std::string& path, const std::string& dataset, int64_t count);

}  // namespace detail
}  // namespace shardtrain
