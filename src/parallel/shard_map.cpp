#include "parallel/shard_map.h"

#include <algorithm>


namespace shardtrain {

std::vector<ShardSegment> window_segments(const ParamLayout& layout, ElementRange window, int64_t shard_begin) {
  const int64_t begin = std::min(window.begin, layout.numel());
  const int64_t end = std::min(window.end, layout.numel());
  if (begin >= end) return {};
  return {ShardSegment{begin, shard_begin + (begin - window.begin), end - begin}};
}

std::vector<ShardSegment> clip_segments(const std::vector<ShardSegment>& segments, ElementRange window) {
  std::vector<ShardSegment> out;
  for (const ShardSegment& s : segments) {
    const int64_t begin = std::max(s.shard_begin, window.begin);
    const int64_t end = std::min(s.shard_begin + s.count, window.end);
    if (begin >= end) continue;
    out.push_back({s.layout_begin + (begin - s.shard_begin), begin, end - begin});
  }
  return out;
}

std::vector<ElementRange> shard_decay_ranges(const ParamLayout& layout, const std::vector<ShardSegment>& segments) {
  std::vector<ElementRange> out;
  for (const ShardSegment& s : segments) {
    for (const ElementRange& r : layout.decay_ranges_in({s.layout_begin, s.layout_begin + s.count})) {
      const ElementRange range{s.shard_begin + r.begin, s.shard_begin + r.end};
      if (!out.empty() && out.back().end == range.begin)
        out.back().end = range.end;
      else
        out.push_back(range);
    }
  }
  std::sort(out.begin(), out.end(), [](const ElementRange& a, const ElementRange& b) { return a.begin < b.begin; });
  return out;
}

std::vector<FlatPart> shard_parts(const std::vector<ShardSegment>& segments,
                                  const std::function<at::Tensor(const ShardSegment&)>& params_of,
                                  const AdamW& adamw) {
  std::vector<FlatPart> parts;
  for (const ShardSegment& s : segments) {
    FlatPart part;
    part.begin = s.layout_begin;
    part.params = params_of(s);
    part.exp_avg = adamw.exp_avg().narrow(0, s.shard_begin, s.count);
    part.exp_avg_sq = adamw.exp_avg_sq().narrow(0, s.shard_begin, s.count);
    parts.push_back(part);
  }
  if (parts.empty()) {
    FlatPart empty;
    empty.params = adamw.exp_avg().narrow(0, 0, 0);
    empty.exp_avg = adamw.exp_avg().narrow(0, 0, 0);
    empty.exp_avg_sq = adamw.exp_avg_sq().narrow(0, 0, 0);
    parts.push_back(empty);
  }
  return parts;
}

}  // namespace shardtrain
