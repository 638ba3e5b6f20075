// The CPU's vector and matrix features that decide whether bf16 pays on a
// CPU (docs/DESIGN.md, "Mixed precision on a CPU"), read with cpuid.
//
//   const CpuFeatures cpu = current_cpu_features();   // SHARDTRAIN_CPU_FEATURES overrides (tests)
//   const std::string advice = advise_cpu_precision(cpu, bf16, rows, hidden, intermediate);
//
// Without AVX512_BF16 or AMX-BF16, LibTorch converts bf16 to fp32 around its
// matmuls, and bf16 training runs several times slower than fp32 (15x for the
// quickstart on an AVX2-only EPYC); with them, bf16 trains a bert-base-sized
// model faster than fp32 (2.26x on a Xeon with AMX). benchmarks/README.md has
// the figures.
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
// run, the best of 3). The rows are cut to at most `max_flops` per matmul: the
// default keeps a CPU without bf16 instructions well under a second; a CPU
// with them multiplies 10x more in about as long, and a larger matmul times
// it with less noise.
struct MatmulRatio {
  double bf16_s = 0, fp32_s = 0;
  long long rows = 0;
  double ratio() const { return fp32_s > 0 ? bf16_s / fp32_s : 0.0; }
};
MatmulRatio measure_bf16_matmul_ratio(long long rows, long long hidden, long long intermediate,
                                      double max_flops = 2.5e8);

// What `train` says about its precision on a CPU (rank 0), decided from the
// CPU's features, the precision asked for, the model's hidden size and a
// measured bf16 / fp32 matmul ratio: a pure function, so the decision for any
// CPU is testable on this one.
//   - bf16 without avx512_bf16 / amx_bf16: a warning that bf16 is slower here
//     ("... took 27.1x as long as fp32 here ..."), whatever the ratio;
//   - fp32 with one of them, a model at least kBf16FasterMinHidden wide and a
//     bf16 matmul that took at most kBf16FasterRatio of fp32's time: that bf16
//     would likely train faster ("... took 0.05x as long as fp32 here ...");
//   - otherwise "". A narrower model gains little (the quickstart's hidden
//     size 128: 0.88-1.11x on an EPYC with avx512_bf16), since its
//     LayerNorms, softmax, AdamW and casts stay fp32 (docs/DESIGN.md).
inline constexpr double kBf16FasterRatio = 0.5;
inline constexpr long long kBf16FasterMinHidden = 512;
std::string cpu_precision_advice(const CpuFeatures& cpu, bool bf16, long long hidden, long long intermediate,
                                 const MatmulRatio& measured);
// Whether cpu_precision_advice can say anything (then a matmul is timed).
bool cpu_precision_advice_needs_ratio(const CpuFeatures& cpu, bool bf16, long long hidden);
// Times a matmul of the model's MLP shape ([rows, hidden] x [hidden,
// intermediate]) when cpu_precision_advice_needs_ratio, then advises.
std::string advise_cpu_precision(const CpuFeatures& cpu, bool bf16, long long rows, long long hidden,
                                 long long intermediate);

}  // namespace shardtrain
