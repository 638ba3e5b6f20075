// Golden fixtures written by tests/fixtures/make_*_golden.py: a tensor by
// name, and how far a result lies outside its tolerance.
#pragma once

#include <torch/torch.h>
#include <doctest/doctest.h>

#include <string>

#include "shardtrain/model/safetensors.h"

namespace shardtrain_test {

inline at::Tensor golden_tensor(const shardtrain::NamedTensors& tensors, const std::string& name) {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  FAIL("golden tensor missing: " << name);
  return {};
}

// max(|got - want| - (tol + tol |want|)): <= 0 when every element is within
// the relative-plus-absolute tolerance of the fp64 truth rounded to fp32.
inline double golden_excess(const at::Tensor& got, const at::Tensor& want, double tol) {
  const at::Tensor g = got.detach().to(at::kDouble), w = want.to(at::kDouble);
  return ((g - w).abs() - (tol + tol * w.abs())).max().item<double>();
}

}  // namespace shardtrain_test
