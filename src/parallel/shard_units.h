// Private to src/parallel: the units of ShardedStrategy (parallel/sharded.h)
// and the states each one goes through (docs/DESIGN.md, "Sharded units").
//
// A unit is one forward unit of the model (UnitModel: the embeddings, an
// encoder layer, the head), or the persistent unit that collects the small
// parameters stage 3 never frees. It owns
//   params   [padded]  the full parameters; the module's parameters are views
//   grads    [padded]  the full gradients while they exist; .grad are views
// and this rank's chunk of both sits at `shard_offset` of the strategy's shard
// buffers (chunk = padded / G for a shard group of G ranks).
//
// Parameters (ParamState):
//
//   kFreed --launch_gather--> kGathering --(test/wait)--> kGathered --free--> kFreed
//                                  ^                           |
//                                  +-------launch_gather-------+   (a resident unit after a step)
//
// Gradients (GradState), per backward round:
//
//   kNone --attach--> kAccumulating --backward done, round reduces--> kReady
//     ^                    |  (a round without reduction keeps it)       |
//     |                    +--zero_grad--> kNone              launch_reduce
//     |                                                                  v
//     +------------------------------ complete_reduce ---------------- kReducing
//     |                                      | hybrid, the step's last round
//     |                                      v
//     +--complete_inter-- kAveraging <--launch_inter-- kReduced
//
// Every change goes through set(), which checks it against these diagrams:
// a transition that is not drawn is a bug and aborts the job.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "shardtrain/comm/communicator.h"

namespace shardtrain {

enum class ParamState { kFreed, kGathering, kGathered };
enum class GradState { kNone, kAccumulating, kReady, kReducing, kReduced, kAveraging };

const char* param_state_name(ParamState state);
const char* grad_state_name(GradState state);

struct ShardUnit {
  std::vector<int> slots;        // layout slots, in layout order
  std::vector<int64_t> offsets;  // each slot's first element in the unit buffers
  int64_t numel = 0, padded = 0, chunk = 0, shard_offset = 0;
  bool resident = false;  // parameters never freed (stage 2, the persistent unit)
  int index = 0;          // in the strategy's unit list, for messages

  at::Tensor params;    // [padded]; storage freed while kFreed
  at::Tensor grads;     // [padded] while the gradient state is kAccumulating .. kReducing
  at::Tensor reduced;   // [chunk] reduce-scatter output while kReducing

  std::unique_ptr<Work> gather_work;  // while kGathering
  std::unique_ptr<Work> reduce_work;  // while kReducing
  std::unique_ptr<Work> inter_work;   // while kAveraging
  // Slots whose gradient this round's backward has not accumulated yet; 0
  // when the unit's backward of the round is done (or no round is open).
  int pending = 0;

  ParamState param_state() const { return param_state_; }
  GradState grad_state() const { return grad_state_; }
  void set(ParamState to);
  void set(GradState to);

 private:
  ParamState param_state_ = ParamState::kGathered;
  GradState grad_state_ = GradState::kNone;
};

// FSDP's trick for freeing a gathered unit: its parameters stay tensors with
// their shapes (autograd holds on to them for backward), only the memory
// under them goes. Gathering again allocates new memory under the same
// storage, so every view and every tensor autograd saved sees the new values.
void free_storage(const at::Tensor& tensor);
void allocate_storage(const at::Tensor& tensor);

}  // namespace shardtrain
