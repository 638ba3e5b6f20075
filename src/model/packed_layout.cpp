// Shapes: B sequences, T packed tokens, Lmax the longest sequence, L a padded length.
#include <ATen/ATen.h>

#include <algorithm>
#include <limits>

#include "model/encoder.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain::detail {
namespace {

c10::Scalar lowest_value(at::ScalarType type) {
  switch (type) {
    case at::kDouble: return std::numeric_limits<double>::lowest();
    case at::kHalf: return -65504.0;
    case at::kBFloat16: return -3.3895313892515355e38;
    default: return std::numeric_limits<float>::lowest();
  }
}

}  // namespace

at::Tensor extended_attention_mask(const at::Tensor& keep, at::ScalarType dtype) {
  return (1.0 - keep.to(dtype)).mul_(lowest_value(dtype)).view({keep.size(0), 1, 1, keep.size(1)});
}

at::Tensor windowed_attention_mask(const at::Tensor& extended_mask, int64_t half_window) {
  const int64_t L = extended_mask.size(-1);
  const at::Tensor rows = at::arange(L, extended_mask.options().dtype(at::kLong));
  const at::Tensor outside = (rows.unsqueeze(1) - rows.unsqueeze(0)).abs_().gt(half_window);  // [L, L]
  // HF: global_attention_mask.masked_fill(~window, finfo.min), [B, 1, L, L].
  return extended_mask.expand({extended_mask.size(0), 1, L, L})
      .masked_fill(outside.view({1, 1, L, L}), lowest_value(extended_mask.scalar_type()));
}

bool banded_pays(const PackedLayout& layout, int64_t half_window) {
  return banded_attention_pays(layout.max_seqlen, half_window);
}

BandedMask banded_attention_mask(const PackedLayout& layout, int64_t half_window, at::ScalarType dtype) {
  BandedMask band;
  band.half_window = half_window;
  band.block = banded_attention_block(half_window);
  const int64_t T = layout.sequence_of.size(0), Bq = band.block, W = band.width();
  const int64_t nb = (T + Bq - 1) / Bq, Tq = nb * Bq;
  const at::TensorOptions longs = layout.sequence_of.options().dtype(at::kLong);
  const at::Tensor query = at::arange(Tq, longs).view({nb, Bq, 1});
  const at::Tensor key = (at::arange(nb, longs) * Bq - half_window).view({nb, 1, 1}) + at::arange(W, longs).view({1, 1, W});
  // The sequence of every query row (-1 past T) and key row (-2 outside [0, T)).
  const at::Tensor sequence = at::cat({layout.sequence_of.to(at::kLong), at::full({Tq - T}, -1, longs)});
  const at::Tensor query_sequence = sequence.index_select(0, query.flatten()).view({nb, Bq, 1});
  const at::Tensor key_inside = key.ge(0).logical_and(key.lt(T));  // [nb, 1, W]
  const at::Tensor key_sequence =
      at::where(key_inside, sequence.index_select(0, key.clamp(0, T - 1).flatten()).view({nb, 1, W}), -2);
  const at::Tensor same_sequence = query_sequence.ge(0).logical_and(query_sequence.eq(key_sequence));  // [nb, Bq, W]
  const at::Tensor allowed = key.eq(query).logical_or(same_sequence.logical_and((query - key).abs().le(half_window)));
  band.additive = at::zeros({nb, 1, Bq, W}, longs.dtype(dtype))
                      .masked_fill_(allowed.logical_not().unsqueeze(1), lowest_value(dtype));
  return band;
}

PackedLayout PackedLayout::from_cu_seqlens(const at::Tensor& cu_seqlens, int64_t max_seqlen, at::ScalarType dtype,
                                           const at::Device& device) {
  if (!cu_seqlens.defined() || cu_seqlens.dim() != 1 || cu_seqlens.size(0) < 2)
    throw Error("forward_packed: cu_seqlens must be [B+1] with B >= 1");
  if (max_seqlen < 1) throw Error("forward_packed: max_seqlen must be >= 1, got " + std::to_string(max_seqlen));
  const at::Tensor cu = cu_seqlens.to(at::kCPU, at::kLong).contiguous();
  const int64_t* bounds = cu.data_ptr<int64_t>();
  const int64_t B = cu.size(0) - 1, T = bounds[B];
  if (bounds[0] != 0) throw Error("forward_packed: cu_seqlens must start at 0");
  // Every length checked before anything is sized from the bounds.
  for (int64_t b = 0; b < B; ++b) {
    const int64_t length = bounds[b + 1] - bounds[b];
    if (length < 1 || length > max_seqlen)
      throw Error(str_format("forward_packed: sequence %lld has %lld tokens (cu_seqlens %lld..%lld); each needs "
                             "1..max_seqlen (%lld)",
                             static_cast<long long>(b), static_cast<long long>(length),
                             static_cast<long long>(bounds[b]), static_cast<long long>(bounds[b + 1]),
                             static_cast<long long>(max_seqlen)));
  }
  PackedLayout layout;
  layout.num_sequences = B;
  layout.max_seqlen = max_seqlen;
  // Built on the host: B and T are small, and the layers reuse it all.
  at::Tensor rows = at::empty({T}, at::kLong), sequence = at::empty({T}, at::kLong);
  at::Tensor first = at::empty({B}, at::kLong), lengths = at::empty({B}, at::kLong);
  at::Tensor keep = at::zeros({B, max_seqlen}, at::kFloat);
  int64_t* row = rows.data_ptr<int64_t>();
  int64_t* seq = sequence.data_ptr<int64_t>();
  float* kept = keep.data_ptr<float>();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t length = bounds[b + 1] - bounds[b];
    first.data_ptr<int64_t>()[b] = bounds[b];
    lengths.data_ptr<int64_t>()[b] = length;
    for (int64_t p = 0; p < length; ++p) {
      row[bounds[b] + p] = b * max_seqlen + p;
      seq[bounds[b] + p] = b;
      kept[b * max_seqlen + p] = 1.0f;
    }
  }
  layout.padded_rows = rows.to(device);
  layout.sequence_of = sequence.to(device);
  layout.first_tokens = first.to(device);
  layout.lengths = lengths.to(device);
  // HF's extended mask: (1 - mask) * finfo.min, in the activations' dtype.
  layout.additive_mask = extended_attention_mask(keep, dtype).to(device);
  return layout;
}

at::Tensor PackedLayout::positions() const { return padded_rows.remainder(max_seqlen); }

}  // namespace shardtrain::detail
