// Bounds on sizes that come from input (configs, data, model files), checked
// before anything of that size is allocated.
#pragma once

#include <cstdint>

namespace shardtrain {

// The most labels a classifier may have. A larger count is a mistake (a label
// value such as 1000000000 read as a class id, a stray key), and its id2label
// table alone would take gigabytes before anything could say so.
inline constexpr int64_t kMaxNumLabels = int64_t{1} << 20;

}  // namespace shardtrain
