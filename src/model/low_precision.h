// Private to src/model: which activations count as 16-bit, for the fp32
// islands of mixed precision (LayerNorm, softmax; docs/DESIGN.md, "Mixed
// precision").
#pragma once

#include <c10/core/ScalarType.h>

namespace shardtrain {
namespace detail {

inline bool is_16bit(c10::ScalarType t) { return t == c10::kBFloat16 || t == c10::kHalf; }

}  // namespace detail
}  // namespace shardtrain
