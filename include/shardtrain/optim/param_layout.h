// Flat parameter layout: where each named parameter lives in the one flat
// buffer that strategies and AdamW work on, and which elements get weight decay.
//
// Built from the model's named_parameters() in their order (HF names), dense:
// parameter i starts where parameter i-1 ends, no alignment padding. ZeRO/FSDP
// pad only at the end, to a multiple of the world size (padded_numel()), and
// rank r owns shard_range(r, world_size) of the padded buffer.
//
// Weight decay follows HF run_glue / Accelerate's examples:
//   no_decay = ["bias", "LayerNorm.weight"]
//   decay    = not any(nd in name for nd in no_decay)     (substring match)
// extended with "norm.weight" for the families whose norms have other names
// (DistilBERT's sa_layer_norm / output_layer_norm, ModernBERT's attn_norm,
// mlp_norm, final_norm, head.norm), so every `.bias` and every norm weight is
// excluded, as HF Trainer's get_decay_parameter_names excludes every LayerNorm. decay_ranges() lists
// the decayed elements as merged [begin, end) ranges for AdamW::step().
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "shardtrain/optim/adamw.h"

namespace shardtrain {

struct ParamSlot {
  std::string name;
  int64_t offset = 0;  // first element in the flat buffer
  int64_t numel = 0;
  std::vector<int64_t> shape;
  bool decay = true;
};

class ParamLayout {
 public:
  // HF's no_decay substrings.
  static std::vector<std::string> default_no_decay() { return {"bias", "LayerNorm.weight", "norm.weight"}; }

  // Throws shardtrain::Error on a duplicate name.
  explicit ParamLayout(const std::vector<std::pair<std::string, at::Tensor>>& named_parameters,
                       const std::vector<std::string>& no_decay = default_no_decay());

  const std::vector<ParamSlot>& slots() const { return slots_; }
  // Slot by name; throws shardtrain::Error naming the parameter if absent.
  const ParamSlot& slot(const std::string& name) const;
  int64_t numel() const { return numel_; }
  int64_t num_decay_elements() const;

  // numel() rounded up to a multiple of world_size (> 0).
  int64_t padded_numel(int world_size) const;
  // Rank `rank`'s equal share of the padded buffer:
  // [rank * s, (rank + 1) * s) with s = padded_numel(world_size) / world_size.
  ElementRange shard_range(int rank, int world_size) const;

  // Decayed elements of the whole buffer, sorted, adjacent slots merged.
  const std::vector<ElementRange>& decay_ranges() const { return decay_ranges_; }
  // Decayed elements inside `window`, clipped to it and shifted so that
  // window.begin is 0: what AdamW::step() wants for a shard.
  std::vector<ElementRange> decay_ranges_in(ElementRange window) const;
  // 1 for decayed elements, 0 otherwise, float32, numel() elements (for
  // inspection and tests; AdamW takes ranges).
  at::Tensor decay_mask() const;

  // Copies the tensors into a new flat float32 buffer of `total_numel`
  // (>= numel(), the tail zero) in layout order; and views of a flat buffer
  // shaped like the parameters (no copy).
  at::Tensor flatten(const std::vector<at::Tensor>& tensors, int64_t total_numel) const;
  std::vector<at::Tensor> views(const at::Tensor& flat) const;

 private:
  std::vector<ParamSlot> slots_;
  std::vector<ElementRange> decay_ranges_;
  int64_t numel_ = 0;
};

}  // namespace shardtrain
