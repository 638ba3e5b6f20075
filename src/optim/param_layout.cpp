#include "shardtrain/optim/param_layout.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <unordered_set>

#include "shardtrain/core/check.h"

namespace shardtrain {

ParamLayout::ParamLayout(const std::vector<std::pair<std::string, at::Tensor>>& named_parameters,
                         const std::vector<std::string>& no_decay) {
  std::unordered_set<std::string> seen;
  for (const auto& [name, tensor] : named_parameters) {
    if (!seen.insert(name).second) throw Error("parameter layout: duplicate parameter name '" + name + "'");
    ParamSlot slot;
    slot.name = name;
    slot.offset = numel_;
    slot.numel = tensor.numel();
    slot.shape = tensor.sizes().vec();
    // HF: `not any(nd in n for nd in no_decay)` -- a substring test, not a suffix test.
    slot.decay = std::none_of(no_decay.begin(), no_decay.end(),
                              [&](const std::string& nd) { return name.find(nd) != std::string::npos; });
    numel_ += slot.numel;
    if (slot.decay && slot.numel > 0) {
      if (!decay_ranges_.empty() && decay_ranges_.back().end == slot.offset)
        decay_ranges_.back().end = numel_;
      else
        decay_ranges_.push_back({slot.offset, numel_});
    }
    slots_.push_back(std::move(slot));
  }
}

const ParamSlot& ParamLayout::slot(const std::string& name) const {
  for (const ParamSlot& s : slots_)
    if (s.name == name) return s;
  throw Error("parameter layout: no parameter named '" + name + "'");
}

int64_t ParamLayout::num_decay_elements() const {
  int64_t n = 0;
  for (const ElementRange& r : decay_ranges_) n += r.size();
  return n;
}

int64_t ParamLayout::padded_numel(int world_size) const {
  ST_ASSERT(world_size > 0, "padded_numel needs world_size > 0");
  return (numel_ + world_size - 1) / world_size * world_size;
}

ElementRange ParamLayout::shard_range(int rank, int world_size) const {
  ST_ASSERT(rank >= 0 && rank < world_size, "shard_range: rank outside [0, world_size)");
  const int64_t shard = padded_numel(world_size) / world_size;
  return {rank * shard, (rank + 1) * shard};
}

std::vector<ElementRange> ParamLayout::decay_ranges_in(ElementRange window) const {
  std::vector<ElementRange> out;
  for (const ElementRange& r : decay_ranges_) {
    const int64_t begin = std::max(r.begin, window.begin);
    const int64_t end = std::min(r.end, window.end);
    if (begin < end) out.push_back({begin - window.begin, end - window.begin});
  }
  return out;
}

at::Tensor ParamLayout::decay_mask() const {
  at::Tensor mask = at::zeros({numel_}, at::TensorOptions().dtype(at::kFloat));
  for (const ElementRange& r : decay_ranges_) mask.narrow(0, r.begin, r.size()).fill_(1.0);
  return mask;
}

at::Tensor ParamLayout::flatten(const std::vector<at::Tensor>& tensors, int64_t total_numel) const {
  ST_ASSERT(tensors.size() == slots_.size(), "flatten: one tensor per parameter");
  ST_ASSERT(total_numel >= numel_, "flatten: total_numel below the layout's numel");
  at::Tensor flat = at::zeros({total_numel}, at::TensorOptions().dtype(at::kFloat));
  for (size_t i = 0; i < slots_.size(); ++i) {
    TORCH_CHECK(tensors[i].numel() == slots_[i].numel, "flatten: '", slots_[i].name, "' has ", tensors[i].numel(),
                " elements, the layout ", slots_[i].numel);
    flat.narrow(0, slots_[i].offset, slots_[i].numel).copy_(tensors[i].reshape({-1}));
  }
  return flat;
}

std::vector<at::Tensor> ParamLayout::views(const at::Tensor& flat) const {
  TORCH_CHECK(flat.dim() == 1 && flat.numel() >= numel_, "views: need a 1-D buffer of at least ", numel_,
              " elements");
  std::vector<at::Tensor> out;
  out.reserve(slots_.size());
  for (const ParamSlot& s : slots_) out.push_back(flat.narrow(0, s.offset, s.numel).view(s.shape));
  return out;
}

}  // namespace shardtrain
