#include "shardtrain/model/dropout.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <mutex>

#include "model/low_precision.h"

namespace shardtrain {
namespace {

constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ULL;

// SplitMix64's output function: a bijective mix of the counter.
inline uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Elements [first, first + n) of the noise of `seed`: element e takes the low
// 32 bits of pair e / 2's draw when e is even, the high 32 bits when odd.
template <class T>
void fill_noise(T* out, int64_t first, int64_t n, double p, uint64_t seed) {
  // Keep when the 32-bit draw is below (1 - p) 2^32; the kept value as
  // at::dropout computes it: 1 divided by (1 - p) in T.
  const uint64_t threshold = static_cast<uint64_t>(std::ldexp(1.0 - p, 32));
  const T kept = T(1) / static_cast<T>(1.0 - p);
  const int64_t first_pair = first / 2, end_pair = (first + n + 1) / 2;
  at::parallel_for(first_pair, end_pair, 8192, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const uint64_t bits = mix(seed + static_cast<uint64_t>(i) * kGamma);
      const int64_t low = 2 * i - first, high = low + 1;  // positions in out
      if (low >= 0) out[low] = (bits & 0xffffffffULL) < threshold ? kept : T(0);
      if (high < n) out[high] = (bits >> 32) < threshold ? kept : T(0);
    }
  });
}

}  // namespace

uint64_t dropout_seed() {
  at::CPUGeneratorImpl* generator = at::get_generator_or_default<at::CPUGeneratorImpl>(
      c10::nullopt, at::detail::getDefaultCPUGenerator());
  std::lock_guard<std::mutex> lock(generator->mutex_);
  return generator->random64();
}

at::Tensor dropout_noise_slice(uint64_t seed, int64_t first, at::IntArrayRef sizes, double p,
                               at::ScalarType dtype) {
  TORCH_CHECK(p >= 0 && p < 1, "dropout_noise: p must be in [0, 1), got ", p);
  TORCH_CHECK(first >= 0, "dropout_noise_slice: first must be >= 0, got ", first);
  // 16-bit activations (mixed precision): the mask drawn in float32, cast.
  const bool wide = !detail::is_16bit(dtype);
  at::Tensor noise = at::empty(sizes, at::TensorOptions().dtype(wide ? dtype : at::kFloat));
  if (noise.scalar_type() == at::kFloat)
    fill_noise(noise.data_ptr<float>(), first, noise.numel(), p, seed);
  else
    fill_noise(noise.data_ptr<double>(), first, noise.numel(), p, seed);
  return wide ? noise : noise.to(dtype);
}

at::Tensor dropout_noise(const at::Tensor& like, double p) {
  TORCH_CHECK(like.device().is_cpu(), "dropout_noise: CPU tensors only");
  return dropout_noise_slice(dropout_seed(), 0, like.sizes(), p, like.scalar_type());
}

at::Tensor dropout(const at::Tensor& x, double p, bool training) {
  if (!training || p == 0.0) return x;
  // Every CPU float dtype (16-bit ones draw the fp32 run's mask); other devices: ATen's.
  if (!x.device().is_cpu() || !at::isFloatingType(x.scalar_type())) return at::dropout(x, p, true);
  return x * dropout_noise(x, p);
}

}  // namespace shardtrain
