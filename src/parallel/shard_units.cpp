#include "parallel/shard_units.h"

#include <c10/core/StorageImpl.h>

#include <string>

#include "shardtrain/core/check.h"

namespace shardtrain {
namespace {

bool allowed(ParamState from, ParamState to) {
  switch (from) {
    case ParamState::kFreed: return to == ParamState::kGathering;
    case ParamState::kGathering: return to == ParamState::kGathered;
    case ParamState::kGathered: return to == ParamState::kFreed || to == ParamState::kGathering;
  }
  return false;
}

bool allowed(GradState from, GradState to) {
  switch (from) {
    case GradState::kNone: return to == GradState::kAccumulating;
    case GradState::kAccumulating: return to == GradState::kReady || to == GradState::kNone;
    case GradState::kReady: return to == GradState::kReducing;
    case GradState::kReducing: return to == GradState::kNone || to == GradState::kReduced;
    case GradState::kReduced: return to == GradState::kAveraging;
    case GradState::kAveraging: return to == GradState::kNone;
  }
  return false;
}

}  // namespace

const char* param_state_name(ParamState state) {
  static const char* const kNames[] = {"freed", "gathering", "gathered"};
  return kNames[static_cast<int>(state)];
}

const char* grad_state_name(GradState state) {
  static const char* const kNames[] = {"none", "accumulating", "ready", "reducing", "reduced", "averaging"};
  return kNames[static_cast<int>(state)];
}

void ShardUnit::set(ParamState to) {
  ST_ASSERT(allowed(param_state_, to), "sharded unit " + std::to_string(index) + ": parameters " +
                                           param_state_name(param_state_) + " -> " + param_state_name(to));
  param_state_ = to;
}

void ShardUnit::set(GradState to) {
  ST_ASSERT(allowed(grad_state_, to), "sharded unit " + std::to_string(index) + ": gradients " +
                                          grad_state_name(grad_state_) + " -> " + grad_state_name(to));
  grad_state_ = to;
}

void free_storage(const at::Tensor& tensor) {
  c10::StorageImpl* impl = tensor.storage().unsafeGetStorageImpl();
  if (impl->nbytes() == 0) return;
  impl->set_data_ptr_noswap(impl->allocator()->allocate(0));
  impl->set_nbytes(0);
}

void allocate_storage(const at::Tensor& tensor) {
  c10::StorageImpl* impl = tensor.storage().unsafeGetStorageImpl();
  const size_t nbytes = static_cast<size_t>(tensor.numel()) * tensor.element_size();
  if (impl->nbytes() == nbytes) return;
  impl->set_data_ptr_noswap(impl->allocator()->allocate(nbytes));
  impl->set_nbytes(nbytes);
}

}  // namespace shardtrain
