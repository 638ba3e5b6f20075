// The frozen base of a LoRA run, sharded as ZeRO-3 / FSDP shard parameters
// (docs/DESIGN.md, "LoRA"): only the adapters and the modules to save are
// trained, so the strategy (parallel/strategy.h) sees only them; the frozen
// parameters, which have no gradient and no optimizer state, are spread over
// the shard group here, parameters only.
//
// Each forward unit's frozen tensors live in one flat buffer padded to a
// multiple of the group's size; a rank keeps its chunk. Around each unit's
// forward (the model's outer unit hooks, outside the strategy's) the buffer
// is all-gathered and freed again; a hook on the unit's output gathers it for
// the backward, which reads the frozen weights to pass gradients on to the
// layers below. In backward at most two units stay gathered: the one whose
// backward runs and the one above it.
//
//   model.frozen_to(precision.param_dtype);
//   FrozenShards frozen(model, communicator.split(replica, shard_rank));  // installs its hooks
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "shardtrain/model/unit_model.h"

namespace shardtrain {

class Communicator;
class TaskModel;

class FrozenShards : public UnitHooks {
 public:
  // Moves the model's frozen parameters into per-unit buffers (values kept),
  // keeps this rank's chunk and frees the rest. Every rank must hold the same
  // frozen values (the same base folder, or the same seed). Collective over `group`.
  FrozenShards(TaskModel& model, std::unique_ptr<Communicator> group);
  // Removes its hooks; the frozen tensors of units not gathered stay without
  // memory (no collective in a destructor: it may run while a rank fails).
  ~FrozenShards() override;
  FrozenShards(const FrozenShards&) = delete;
  FrozenShards& operator=(const FrozenShards&) = delete;

  void before_forward(int64_t unit) override;
  at::Tensor after_forward(int64_t unit, at::Tensor output) override;

  // Bytes of frozen parameters this rank holds between steps (its chunks), and in all.
  int64_t shard_bytes() const;
  int64_t full_bytes() const;
  // All-gathers of units so far (tests: the backward gathers too).
  int64_t gathers() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardtrain
