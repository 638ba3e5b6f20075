// Private to the model layer: how a family's file lists its parameters
// (FamilySpec::plan, model/family_spec.h). Shapes legend: V vocabulary,
// P positions, T token types, E embedding width, D hidden, I intermediate,
// C labels.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "shardtrain/model/encoder_config.h"
#include "shardtrain/model/parameter_plan.h"

namespace shardtrain::detail {

// Appends the specs of one family's model in forward order.
class PlanBuilder {
 public:
  explicit PlanBuilder(const EncoderConfig& c) : c_(c) {}

  void set_unit(int64_t unit) { unit_ = unit; }

  void add(const std::string& name, std::vector<int64_t> shape, Slot slot, InitKind init, double std = 0.0) {
    ParameterSpec p;
    p.name = name;
    p.shape = std::move(shape);
    p.unit = unit_;
    p.slot = slot;
    p.init = init;
    p.init_std = std;
    if (init == InitKind::kTruncatedNormal) p.init_cutoff = c_.initializer_cutoff_factor;
    p.trainable = init != InitKind::kSinusoidal;  // HF freezes them (requires_grad = False)
    plan_.push_back(std::move(p));
  }
  // A Linear [out, in] with an optional bias; `slot` is the weight's, the bias
  // the next one.
  void linear(const std::string& name, int64_t out, int64_t in, Slot slot, bool bias = true) {
    add(name + ".weight", {out, in}, slot, weight_init_, weight_std_);
    if (bias) add(name + ".bias", {out}, next(slot), InitKind::kZeros);
  }
  void norm(const std::string& name, int64_t width, Slot slot, bool bias = true) {
    add(name + ".weight", {width}, slot, InitKind::kOnes);
    if (bias) add(name + ".bias", {width}, next(slot), InitKind::kZeros);
  }
  void embedding(const std::string& name, int64_t rows, int64_t width, Slot slot, int64_t padding_row = -1,
                 bool zero_padding_row = true) {
    add(name, {rows, width}, slot, weight_init_, weight_std_);
    plan_.back().padding_row = padding_row;
    plan_.back().zero_padding_row = zero_padding_row;
  }
  // How the Linear / Embedding weights that follow are initialised.
  void weights(InitKind init, double std) {
    weight_init_ = init;
    weight_std_ = std;
  }
  std::vector<ParameterSpec> take() { return std::move(plan_); }

 private:
  static Slot next(Slot s) { return static_cast<Slot>(static_cast<int>(s) + 1); }

  const EncoderConfig& c_;
  std::vector<ParameterSpec> plan_;
  int64_t unit_ = 0;
  InitKind weight_init_ = InitKind::kNormal;
  double weight_std_ = 0.02;
};

}  // namespace shardtrain::detail
