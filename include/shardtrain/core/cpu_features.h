// The CPU's vector and matrix features that decide whether bf16 pays on a
// CPU (docs/DESIGN.md, "Mixed precision on a CPU"), read with cpuid.
//
//   const CpuFeatures cpu = current_cpu_features();   // SHARDTRAIN_CPU_FEATURES overrides (tests)
//   if (!cpu.native_bf16()) ... measure_bf16_matmul_ratio(rows, hidden, intermediate) ...
//
// Without AVX512_BF16 or AMX-BF16, LibTorch converts bf16 to fp32 around its
// matmuls, and bf16 training runs several times slower than fp32 (15x for the
// quickstart on an AVX2-only EPYC; benchmarks/README.md has the figures).
#pragma once

#include <string>

namespace shardtrain {

struct CpuFeatures {
  bool avx2 = false;
  bool avx512f = false;
  bool avx512_bf16 = false;  // VDPBF16PS: bf16 dot products into fp32
  bool amx_bf16 = false;     // AMX tiles with bf16 (Sapphire Rapids and later)
  bool native_bf16() const { return avx512_bf16 || amx_bf16; }
  // The present features, /proc/cpuinfo's names: "avx2 avx512f avx512_bf16",
  // or "none of avx2, avx512f, avx512_bf16, amx_bf16".
  std::string describe() const;
};

// What cpuid says (all false off x86-64).
CpuFeatures detect_cpu_features();

// A feature list in /proc/cpuinfo's names, separated by spaces or commas
// ("avx2", "avx2,avx512_bf16", "" for none); Error naming `source` for an
// unknown name.
CpuFeatures parse_cpu_features(const std::string& text, const std::string& source);

// SHARDTRAIN_CPU_FEATURES when set (to test the decisions on any machine),
// else detect_cpu_features().
CpuFeatures current_cpu_features();

// Seconds of one bf16 matmul over seconds of one fp32 matmul of
// [rows, hidden] x [hidden, intermediate] on this CPU (each after one untimed
// run; the rows are cut so that the two take well under a second on a CPU
// without bf16 instructions).
struct MatmulRatio {
  double bf16_s = 0, fp32_s = 0;
  long long rows = 0;
  double ratio() const { return fp32_s > 0 ? bf16_s / fp32_s : 0.0; }
};
MatmulRatio measure_bf16_matmul_ratio(long long rows, long long hidden, long long intermediate);

// For bf16 training on a CPU: "" when `cpu` has native bf16; else a warning
// with the measured ratio of a matmul of the model's shape ([rows, hidden] x
// [hidden, intermediate]): "... a bf16 matmul of [2048, 768] x [768, 3072]
// took 27.1x as long as fp32 here ...".
std::string bf16_slowdown_warning(const CpuFeatures& cpu, long long rows, long long hidden, long long intermediate);

}  // namespace shardtrain
