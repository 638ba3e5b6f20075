// UnitModel: a model as the parallel strategies see it (docs/DESIGN.md,
// "Strategies wrap the model"). Strategies never name a concrete model class:
// they take a UnitModel, so another encoder can be trained by every strategy
// by implementing these few methods.
//
// A model is
//   - its trainable parameters by name, in one fixed order (the flat layout of
//     optim/param_layout.h follows it; for BERT the Hugging Face state-dict
//     order and names);
//   - cut into forward units that run one after the other (BERT: the
//     embeddings, each encoder layer, the head): the FSDP wrapping units,
//     which the sharded strategies gather before and free after each unit;
//   - with hooks around every unit's forward (UnitHooks), the way PyTorch's
//     module forward pre-/post-hooks are.
// The model knows nothing about ranks: hooks are installed from outside.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace shardtrain {

// Called around each unit's forward. Strategies that shard parameters gather a
// unit's parameters in before_forward() and free them in after_forward()
// (parallel/sharded.h).
class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  virtual void before_forward(int64_t unit) = 0;
  // `output` is the unit's output (the logits for the last unit); returns it,
  // or a tensor equal to it (e.g. with a gradient hook registered).
  virtual at::Tensor after_forward(int64_t unit, at::Tensor output) = 0;
};

class UnitModel {
 public:
  virtual ~UnitModel() = default;
  // (name, parameter) of every trainable parameter, in the model's fixed
  // order; the tensors alias the parameters (set_data() on them moves the
  // model's storage, which is how strategies install flat buffers).
  virtual std::vector<std::pair<std::string, at::Tensor>> state_dict() const = 0;
  // Forward units, run in the order 0 .. num_units() - 1.
  virtual int64_t num_units() const = 0;
  // The unit that owns the parameter `name`; throws shardtrain::Error for a
  // name that is not one of state_dict()'s.
  virtual int64_t unit_of(const std::string& name) const = 0;
  // Installs hooks around every unit's forward (nullptr removes them). The
  // hooks must outlive the model or be removed first.
  virtual void set_unit_hooks(UnitHooks* hooks) = 0;
};

}  // namespace shardtrain
