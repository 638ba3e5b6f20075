// The frozen base of a LoRA run, sharded (parallel/frozen_shards.h;
// docs/DESIGN.md, "LoRA").
#include "shardtrain/parallel/frozen_shards.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <map>
#include <string>

#include "parallel/shard_units.h"
#include "shardtrain/comm/communicator.h"
#include "shardtrain/core/check.h"
#include "shardtrain/model/task_model.h"

namespace shardtrain {

struct FrozenShards::Impl {
  TaskModel& model;
  std::unique_ptr<Communicator> group;
  struct Unit {
    at::Tensor full;   // [padded]: the tensors are views; no memory while freed
    at::Tensor chunk;  // [padded / G]: this rank's, always held
    bool gathered = true;
  };
  std::map<int64_t, Unit> units;  // forward unit -> its frozen tensors (units without any are absent)
  int64_t gathers = 0, shard_elements = 0, full_elements = 0, element_size = 4;

  Impl(TaskModel& m, std::unique_ptr<Communicator> g) : model(m), group(std::move(g)) {}

  void gather(Unit& u) {
    if (u.gathered) return;
    allocate_storage(u.full);
    group->all_gather_async(u.chunk, u.full)->wait();
    u.gathered = true;
    ++gathers;
  }
  void free(Unit& u) {
    if (!u.gathered) return;
    free_storage(u.full);
    u.gathered = false;
  }
  // Backward of `unit` is next: gather it; units above unit + 1 are done.
  void pre_backward(int64_t unit) {
    for (auto& [index, u] : units)
      if (index > unit + 1) free(u);
    auto found = units.find(unit);
    if (found != units.end()) gather(found->second);
  }
};

FrozenShards::FrozenShards(TaskModel& model, std::unique_ptr<Communicator> group)
    : impl_(std::make_unique<Impl>(model, std::move(group))) {
  Impl& s = *impl_;
  const int64_t G = s.group->size(), rank = s.group->rank();
  std::map<int64_t, std::vector<at::Tensor>> by_unit;
  for (const auto& [name, tensor] : model.frozen_state_dict()) by_unit[model.plan_unit_of(name)].push_back(tensor);
  at::NoGradGuard no_grad;
  for (auto& [unit, tensors] : by_unit) {
    int64_t numel = 0;
    for (const at::Tensor& t : tensors) numel += t.numel();
    const int64_t padded = (numel + G - 1) / G * G;
    Impl::Unit u;
    u.full = at::zeros({padded}, tensors.front().options().requires_grad(false));
    int64_t offset = 0;
    for (const at::Tensor& t : tensors) {
      at::Tensor view = u.full.narrow(0, offset, t.numel()).view(t.sizes());
      view.copy_(t);
      t.set_data(view);
      offset += t.numel();
    }
    u.chunk = u.full.narrow(0, rank * (padded / G), padded / G).clone();
    s.element_size = u.full.element_size();
    s.shard_elements += padded / G;
    s.full_elements += numel;
    s.free(u);
    s.units.emplace(unit, std::move(u));
  }
  model.set_outer_unit_hooks(this);
}

FrozenShards::~FrozenShards() { impl_->model.set_outer_unit_hooks(nullptr); }

void FrozenShards::before_forward(int64_t unit) {
  Impl& s = *impl_;
  auto found = s.units.find(unit);
  if (found == s.units.end()) return;
  // In forward every other unit is freed already, but what the last backward
  // left gathered is done with.
  for (auto& [index, u] : s.units)
    if (index != unit) s.free(u);
  s.gather(found->second);
}

at::Tensor FrozenShards::after_forward(int64_t unit, at::Tensor output) {
  Impl& s = *impl_;
  auto found = s.units.find(unit);
  if (found == s.units.end()) return output;
  if (at::GradMode::is_enabled() && output.requires_grad())
    output.register_hook([&s, unit](const at::Tensor&) { s.pre_backward(unit); });
  s.free(found->second);
  return output;
}

int64_t FrozenShards::shard_bytes() const { return impl_->shard_elements * impl_->element_size; }
int64_t FrozenShards::full_bytes() const { return impl_->full_elements * impl_->element_size; }
int64_t FrozenShards::gathers() const { return impl_->gathers; }

}  // namespace shardtrain
