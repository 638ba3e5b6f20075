// DeepSpeed's activation_checkpointing section: its presence turns on
// model.gradient_checkpointing (each encoder layer checkpointed, as HF's
// gradient_checkpointing_enable() does under the DeepSpeed integration). The
// knobs for model parallelism and DeepSpeed's own buffers have nothing to act
// on here: accepted where they change nothing, refused where they would.
// docs/DESIGN.md, "Activation checkpointing".
#include <optional>
#include <string>

#include "config/deepspeed_resolver.h"

namespace shardtrain::deepspeed {

void Resolver::resolve_activation_checkpointing(const json* section) {
  const char* name = "activation_checkpointing";
  if (!section) return;
  if (!object(name, *section)) return;
  if (assign("model.gradient_checkpointing", c_.model.gradient_checkpointing, true, name, section, false))
    line(name, section, "model.gradient_checkpointing = true (every encoder layer recomputed in backward)");
  for (const auto& item : section->items()) {
    const std::string key = std::string(name) + "." + item.key();
    const json& v = item.value();
    if (item.key() == "number_checkpoints") {
      if (v.is_null() || v.is_number_integer()) line(key, &v, "accepted, no effect: every encoder layer is a checkpoint");
      else problem(key, &v, "expected an integer or null");
      continue;
    }
    const std::optional<bool> b = boolean(key, v);
    if (!b) continue;
    if (item.key() == "partition_activations") {
      line(key, &v, "accepted, no effect: activations are partitioned across model-parallel ranks, and there are "
                    "none (data parallelism only)");
    } else if (item.key() == "contiguous_memory_optimization") {
      line(key, &v, "accepted, no effect: each checkpointed input is its own tensor");
    } else if (item.key() == "synchronize_checkpoint_boundary") {
      line(key, &v, "accepted, no effect on results (a device synchronization for timing)");
    } else if (item.key() == "cpu_checkpointing" || item.key() == "profile") {
      if (*b)
        problem(key, &v, item.key() == "profile" ? "DeepSpeed's checkpointing profiler is not implemented; set it to false"
                                                 : "keeping checkpointed activations in host memory is not "
                                                   "implemented; set it to false");
      else
        line(key, &v, "accepted");
    } else {
      problem(key, &v, "not a DeepSpeed activation_checkpointing key (partition_activations, cpu_checkpointing, "
                       "contiguous_memory_optimization, number_checkpoints, synchronize_checkpoint_boundary, profile)");
    }
  }
}

}  // namespace shardtrain::deepspeed
