#include "checkpoint/digest.h"

#include <ATen/Parallel.h>

#include <cstring>

#include "checkpoint/checkpoint_format.h"
#include "checkpoint/dtypes.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain {
namespace detail {
namespace {

// Each element's term is mix64 of its bit pattern plus (index + 1) * phi.
template <class Word>
RangeDigest digest_words(const unsigned char* data, int64_t first_index, int64_t count, Word exponent_mask) {
  // Sums are associative modulo 2^64, so threads may split the range.
  const auto combine = [](RangeDigest a, RangeDigest b) {
    return RangeDigest{a.checksum + b.checksum, a.non_finite + b.non_finite};
  };
  return at::parallel_reduce(
      int64_t{0}, count, int64_t{1} << 16, RangeDigest{},
      [&](int64_t begin, int64_t end, RangeDigest out) {
        uint64_t offset = static_cast<uint64_t>(first_index + begin + 1) * kGolden;
        for (int64_t i = begin; i < end; ++i) {
          Word word;
          std::memcpy(&word, data + i * static_cast<int64_t>(sizeof(Word)), sizeof(Word));
          out.checksum += mix64(static_cast<uint64_t>(word) + offset);
          offset += kGolden;
          // All exponent bits set: infinity or NaN (a zero mask: integers).
          out.non_finite += exponent_mask != 0 && (word & exponent_mask) == exponent_mask;
        }
        return out;
      },
      combine);
}

std::string hex(uint64_t value) { return str_format("0x%016llx", static_cast<unsigned long long>(value)); }

}  // namespace

RangeDigest digest(const void* data, int dtype, int64_t first_index, int64_t count) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  if (count <= 0) return {};
  switch (dtype_table()[static_cast<size_t>(dtype)].scalar_type) {
    case at::kFloat: return digest_words<uint32_t>(bytes, first_index, count, 0x7F800000u);
    case at::kDouble: return digest_words<uint64_t>(bytes, first_index, count, 0x7FF0000000000000ull);
    case at::kInt: return digest_words<uint32_t>(bytes, first_index, count, 0u);
    case at::kLong: return digest_words<uint64_t>(bytes, first_index, count, 0ull);
    default: break;
  }
  ST_ASSERT(false, "checkpoint checksum: unexpected dtype");
  return {};
}

void checksum_mismatch(const std::string& path, const std::string& dataset, uint64_t stored, uint64_t computed) {
  throw Error(path + ": tensor " + dataset + " fails its checksum (stored " + hex(stored) + ", data gives " +
              hex(computed) + "): the file was damaged after it was written; use another checkpoint");
}

void non_finite_values(const std::string& path, const std::string& dataset, int64_t count) {
  throw Error(path + ": tensor " + dataset + " holds " + std::to_string(count) +
              " non-finite values (NaN or infinity); refusing to load it (the run had diverged, or the file is "
              "damaged); use an earlier checkpoint");
}

}  // namespace detail
}  // namespace shardtrain
