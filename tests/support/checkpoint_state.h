// A small "state dict" with awkward shapes for the checkpoint tests, and ways to
// cut its flat concatenation into uneven, ZeRO-like shards.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "shardtrain/checkpoint/checkpoint.h"

namespace shardtrain_test {

// Shapes chosen so shard boundaries cross tensor and row boundaries: 2-d, 1-d,
// 3-d, one element, a scalar, an empty tensor, a size-1 middle dimension.
inline std::vector<shardtrain::FlatTensor> awkward_layout() {
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {
      {"bert.embeddings.word_embeddings.weight", {3, 5}},
      {"bert.embeddings.LayerNorm.bias", {7}},
      {"bert.encoder.layer.0.attention.self.query.weight", {2, 3, 4}},
      {"classifier.bias", {1}},
      {"scalar", {}},
      {"empty", {0}},
      {"bert.pooler.dense.weight", {4, 1, 3}},
      {"tail", {2, 9}},
  };
  std::vector<shardtrain::FlatTensor> layout;
  int64_t offset = 0;
  for (auto& [name, shape] : shapes) {
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    layout.push_back({name, shape, offset});
    offset += numel;
  }
  return layout;
}

inline int64_t layout_numel(const std::vector<shardtrain::FlatTensor>& layout) {
  const auto& last = layout.back();
  int64_t numel = 1;
  for (int64_t d : last.shape) numel *= d;
  return last.offset + numel;
}

// The whole flat state: distinct, non-round values (bit-exact comparisons
// would not notice a swapped pair of equal values). `salt` separates groups.
inline at::Tensor flat_state(int64_t numel, double salt) {
  return (at::arange(numel, at::kDouble) * 0.7310585786 + salt).sin().to(at::kFloat) * 3.0f;
}

// Uneven cut points of [0, numel) into `parts` ranges: quadratic spacing (the
// first ranks get small shards) and, with 3+ parts, part 1 gets nothing.
inline std::vector<int64_t> uneven_cuts(int64_t numel, int parts) {
  std::vector<int64_t> cuts(parts + 1);
  for (int k = 0; k <= parts; ++k) cuts[k] = (numel * k * k + parts * parts / 2) / (parts * parts);
  cuts[parts] = numel;
  if (parts >= 3) cuts[2] = cuts[1];
  return cuts;
}

inline std::vector<int64_t> even_cuts(int64_t numel, int parts) {
  std::vector<int64_t> cuts(parts + 1);
  for (int k = 0; k <= parts; ++k) cuts[k] = numel * k / parts;
  return cuts;
}

// The slices of part `part` (cuts[part], cuts[part+1]) as views of `flat`.
inline std::vector<shardtrain::TensorSlice> part_slices(const std::vector<shardtrain::FlatTensor>& layout,
                                                        const at::Tensor& flat, const std::vector<int64_t>& cuts,
                                                        int part) {
  return shardtrain::slices_of_shard(layout, cuts[part], flat.narrow(0, cuts[part], cuts[part + 1] - cuts[part]));
}

}  // namespace shardtrain_test
