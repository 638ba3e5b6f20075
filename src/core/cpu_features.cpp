#include "shardtrain/core/cpu_features.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <sstream>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain {

std::string CpuFeatures::describe() const {
  std::string out;
  auto add = [&out](bool on, const char* name) {
    if (on) out += (out.empty() ? "" : " ") + std::string(name);
  };
  add(avx2, "avx2");
  add(avx512f, "avx512f");
  add(avx512_bf16, "avx512_bf16");
  add(amx_bf16, "amx_bf16");
  return out.empty() ? "none of avx2, avx512f, avx512_bf16, amx_bf16" : out;
}

CpuFeatures detect_cpu_features() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  // Leaf 7, sub-leaf 0: EBX bit 5 AVX2, bit 16 AVX512F; EDX bit 22 AMX-BF16.
  __cpuid_count(7, 0, a, b, c, d);
  const unsigned max_subleaf = a;
  f.avx2 = (b >> 5) & 1;
  f.avx512f = (b >> 16) & 1;
  f.amx_bf16 = (d >> 22) & 1;
  // Leaf 7, sub-leaf 1: EAX bit 5 AVX512_BF16.
  if (max_subleaf >= 1) {
    __cpuid_count(7, 1, a, b, c, d);
    f.avx512_bf16 = (a >> 5) & 1;
  }
#endif
  return f;
}

CpuFeatures parse_cpu_features(const std::string& text, const std::string& source) {
  std::string spaced = text;
  std::replace(spaced.begin(), spaced.end(), ',', ' ');
  std::istringstream words(spaced);
  CpuFeatures f;
  for (std::string w; words >> w;) {
    if (w == "avx2")
      f.avx2 = true;
    else if (w == "avx512f")
      f.avx512f = true;
    else if (w == "avx512_bf16")
      f.avx512_bf16 = true;
    else if (w == "amx_bf16")
      f.amx_bf16 = true;
    else
      throw Error(source + ": unknown CPU feature '" + shorten(w) + "' (known: avx2, avx512f, avx512_bf16, amx_bf16)");
  }
  return f;
}

CpuFeatures current_cpu_features() {
  const char* forced = std::getenv("SHARDTRAIN_CPU_FEATURES");
  return forced ? parse_cpu_features(forced, "SHARDTRAIN_CPU_FEATURES") : detect_cpu_features();
}

MatmulRatio measure_bf16_matmul_ratio(long long rows, long long hidden, long long intermediate, double max_flops) {
  // By default about 0.25 GFLOP per matmul, four of each (one untimed): on an
  // AVX2-only CPU (bf16 4.5, fp32 121 GFLOP/s) 0.22 s of bf16 and 0.01 s of fp32.
  const double flops_per_row = 2.0 * static_cast<double>(hidden) * static_cast<double>(intermediate);
  MatmulRatio r;
  r.rows = std::max(16LL, std::min(rows, static_cast<long long>(max_flops / flops_per_row)));
  const at::Tensor x32 = at::randn({r.rows, hidden}), w32 = at::randn({hidden, intermediate});
  const at::Tensor x16 = x32.to(at::kBFloat16), w16 = w32.to(at::kBFloat16);
  at::matmul(x32, w32);  // untimed: thread pools, packing buffers
  at::matmul(x16, w16);
  auto once = [](const at::Tensor& x, const at::Tensor& w) {
    const auto start = std::chrono::steady_clock::now();
    at::Tensor y = at::matmul(x, w);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  // The best of three, alternating, so a busy machine disturbs both alike.
  r.fp32_s = r.bf16_s = 1e30;
  for (int i = 0; i < 3; ++i) {
    r.fp32_s = std::min(r.fp32_s, once(x32, w32));
    r.bf16_s = std::min(r.bf16_s, once(x16, w16));
  }
  return r;
}

bool cpu_precision_advice_needs_ratio(const CpuFeatures& cpu, bool bf16, long long hidden) {
  return bf16 ? !cpu.native_bf16() : cpu.native_bf16() && hidden >= kBf16FasterMinHidden;
}

std::string cpu_precision_advice(const CpuFeatures& cpu, bool bf16, long long hidden, long long intermediate,
                                 const MatmulRatio& r) {
  if (!cpu_precision_advice_needs_ratio(cpu, bf16, hidden)) return "";
  const std::string matmul =
      str_format("a bf16 matmul of [%lld, %lld] x [%lld, %lld] took %.2fx as long as fp32 here (%.2f ms against "
                 "%.2f ms, best of 3)",
                 r.rows, hidden, hidden, intermediate, r.ratio(), r.bf16_s * 1e3, r.fp32_s * 1e3);
  if (bf16)
    return "train.mixed_precision = \"bf16\" on a CPU without bf16 instructions (cpuid: " + cpu.describe() +
           "; no avx512_bf16 or amx_bf16): " + matmul +
           ", and training slows down about as much; use \"no\" for speed on this machine, bf16 to test a bf16 setup";
  if (!(r.fp32_s > 0) || r.ratio() > kBf16FasterRatio) return "";
  return "train.mixed_precision = \"no\" on a CPU with bf16 instructions (cpuid: " + cpu.describe() + "): " + matmul +
         "; a model this wide (hidden size " + std::to_string(hidden) +
         ") likely trains faster with train.mixed_precision = \"bf16\" (bert-base: 2.26x fp32's speed on a Xeon "
         "with avx512_bf16 / AMX), with fp32 master weights and AdamW state";
}

std::string advise_cpu_precision(const CpuFeatures& cpu, bool bf16, long long rows, long long hidden,
                                 long long intermediate) {
  if (!cpu_precision_advice_needs_ratio(cpu, bf16, hidden)) return "";
  // With bf16 instructions (fp32 asked for), 2 GFLOP: tens of milliseconds.
  const double max_flops = cpu.native_bf16() ? 2e9 : 2.5e8;
  return cpu_precision_advice(cpu, bf16, hidden, intermediate,
                              measure_bf16_matmul_ratio(rows, hidden, intermediate, max_flops));
}

}  // namespace shardtrain
