// Private to src/parallel: which elements of the flat layout a rank holds,
// once for every strategy (llm.c's "which shard is mine"; docs/DESIGN.md,
// "Flat buffers and shards").
//
// A rank's optimizer state is one buffer (its shard). A ShardSegment says that
// `count` elements of the layout starting at `layout_begin` sit at
// `shard_begin` of that buffer. Under DDP the shard is the whole layout
// (shard_begin = layout_begin); under ZeRO-1 it is shard_range(rank, W) of the
// padded layout clipped to numel() (shard_begin = layout_begin - shard.begin);
// under ZeRO-2/3 it is this rank's chunk of every unit, cut at parameter
// boundaries, the units' padding in no segment. Everything that maps between
// the layout and a shard derives from the segments: the weight-decay ranges
// AdamW gets, and the checkpoint parts a rank writes and reads.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "shardtrain/checkpoint/flat_state.h"
#include "shardtrain/optim/adamw.h"
#include "shardtrain/optim/param_layout.h"

namespace shardtrain {

struct ShardSegment {
  int64_t layout_begin = 0;
  int64_t shard_begin = 0;
  int64_t count = 0;
};

// One segment: layout elements `window` (clipped to layout.numel()), which
// start at `shard_begin` in the shard buffer.
std::vector<ShardSegment> window_segments(const ParamLayout& layout, ElementRange window, int64_t shard_begin);

// The segments restricted to shard elements [window.begin, window.end)
// (hybrid replicas split their shard so each element is checkpointed once).
std::vector<ShardSegment> clip_segments(const std::vector<ShardSegment>& segments, ElementRange window);

// The decayed elements of the shard buffer (shard coordinates, sorted,
// adjacent ranges merged), for AdamW::step.
std::vector<ElementRange> shard_decay_ranges(const ParamLayout& layout, const std::vector<ShardSegment>& segments);

// The checkpoint parts of the segments: params from params_of(segment) (a
// view of `count` elements), AdamW's moments from `adamw` at shard_begin. At
// least one part: an empty one when there are no segments.
std::vector<FlatPart> shard_parts(const std::vector<ShardSegment>& segments,
                                  const std::function<at::Tensor(const ShardSegment&)>& params_of,
                                  const AdamW& adamw);

}  // namespace shardtrain
