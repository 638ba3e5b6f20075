// The memory one rank needs to train a model with a strategy, computed from
// the model's config and the run config alone, before anything is allocated
// (docs/DESIGN.md, "Memory estimate"). `shardtrain estimate-memory` prints it
// for a table of strategies and rank counts; `train` prints it for its own job
// and refuses a job that cannot fit.
//
//   RunConfig run = ...;                       // strategy, precision, batch, offload
//   EncoderConfig model = EncoderConfig::from_file("bert-base-cased/config.json");
//   MemoryEstimate e = estimate_memory(run, model, /*world_size=*/4);
//   e.model_states_bytes();  e.total_bytes();
//
// Model states follow the strategies' own buffers, element for element
// (parallel/*.h): the flat buffers of ddp / zero1 padded to a multiple of the
// world size, zero2 / zero3 / fsdp / hybrid's per-unit buffers (units of
// parameter_plan(): the embeddings, each encoder layer, the head, and stage
// 3's persistent unit of small tensors) padded to the shard group, AdamW's two
// fp32 moments and, with 16-bit parameters, the fp32 master copy of the shard;
// optimizer offload on a GPU moves the master, a gradient copy and AdamW's
// state of the shard into host memory (on a CPU device there is nothing to
// move). They equal Strategy::memory() of the built strategy (tested).
//
// Activations follow the model's layer shapes (what autograd keeps of each
// layer for backward, with the encoder layer's code in mind; see
// layer_activation_bytes below), for full-length rows of B x L tokens (the
// worst case: unpadded batches hold only the real tokens).
//
// LoRA (config.lora.enabled(); model/lora.h): the strategy holds only the
// trained parameters, lora_trainable_plan()'s (the adapters and the modules
// to save), and its states above are theirs. The frozen base is parameters
// only, in the parameters' dtype (16-bit under bf16 / fp16, no master copy):
// whole on every rank under ddp, zero1 and zero2, and under zero3 and hybrid
// (fsdp FULL_SHARD / HYBRID_SHARD) sharded per unit over the shard group
// (parallel/frozen_shards.h), which gathers a whole unit around its forward
// and two in backward. With lora.adapter the adapter's adapter_config.json
// gives r, the targets and the modules to save, as the job uses them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shardtrain/core/run_config.h"
#include "shardtrain/model/encoder_config.h"
#include "shardtrain/model/lora.h"

namespace shardtrain {

// What a training forward keeps for backward, in bytes, for B sequences of L
// tokens. `element_bytes`: the parameters' dtype (4 fp32, 2 bf16 / fp16);
// LayerNorm inputs and attention probabilities stay fp32 in mixed precision.
// Dropout probabilities come from the model config (set the run's overrides
// on it first).
struct ActivationEstimate {
  double embeddings_bytes = 0;  // the embeddings' saved tensors
  double layer_bytes = 0;       // one encoder layer's, not checkpointed (the largest layer)
  double layers_bytes = 0;      // every encoder layer's, as kept (checkpointed: their inputs)
  double head_bytes = 0;        // the head's, and the last layer's output it keeps alive
  double kept_bytes = 0;        // after forward: embeddings + layers + head
  double peak_bytes = 0;        // during backward: kept + one layer recomputed (checkpointing) + gradients in flight
};
// `device_is_cpu`: the CPU attention kernel keeps no probabilities above
// kAttentionBlockScores (model/encoder_config.h). `unpadded`: the model runs
// packed batches (model.unpadded), where ModernBERT's local layers attend in
// blocks of their window (banded_attention_pays), not over L x L scores.
// `lora`: the model has that adapter and its base is frozen: a frozen Linear
// that is no target keeps no input, frozen embeddings keep nothing, and each
// target adds its [T, r] down-projection (src/train/memory_activations.cpp).
ActivationEstimate estimate_activations(const EncoderConfig& model, int64_t batch_size, int64_t seq_len,
                                        int element_bytes, bool checkpointing, bool device_is_cpu, bool unpadded,
                                        const LoraSpec* lora = nullptr);

struct MemoryEstimate {
  std::string strategy;     // as the job's log names it: ddp, zero1, zero2, zero3, hybrid; fsdp kept as "fsdp"
  std::string precision;    // train.mixed_precision: no, bf16, fp16
  int world_size = 1;
  int shard_group = 1;      // ranks that hold one copy of the sharded state (ddp: 1)
  bool offload = false;     // optimizer state in host memory (a GPU with parallel.offload_optimizer = "cpu")
  bool device_is_cpu = true;
  int64_t num_parameters = 0;  // trained: in the strategy (LoRA: the adapters and the modules to save)
  // LoRA: the adapter's rank (0: full fine-tuning), its target modules as
  // PEFT writes them, and the frozen base's parameters (not trained).
  int64_t lora_r = 0;
  std::vector<std::string> lora_target_modules;
  int64_t num_frozen_parameters = 0;
  bool frozen_sharded = false;  // the frozen base over the shard group (zero3, hybrid), else whole on each rank
  int64_t batch_size = 0, seq_len = 0;
  bool checkpointing = false;

  // Held between steps (what Strategy::memory() counts), per rank.
  double param_bytes = 0, grad_bytes = 0, optimizer_bytes = 0;  // on the device
  double host_bytes = 0;  // offload: master, gradient copy and AdamW state of the shard
  // zero3 / fsdp / hybrid: the largest gathered unit, and the most gathered
  // parameters + unsharded gradients alive at once (prefetch included); zero2:
  // every unit's full gradients (worst case: reductions trailing backward),
  // or the step's shard buffer.
  int64_t largest_unit_numel = 0;
  std::string largest_unit;  // "embeddings", "encoder layer", "head"
  double gathered_bytes = 0;
  // Buffers of the collectives beyond the state: zero1's receive buffers and
  // post-step gather copy, the sharded strategies' reduce-scatter outputs (and
  // reduce-dtype copies).
  double comm_bytes = 0;
  // LoRA: the frozen base this rank holds between steps (its chunks when
  // sharded), and the most of it gathered at once beside that (sharded only:
  // the largest unit in forward, or two adjacent units in backward).
  double frozen_bytes = 0, frozen_gathered_bytes = 0;
  ActivationEstimate activations;          // at batch_size, in the configured mode
  ActivationEstimate activations_plain;    // both modes, for the table
  ActivationEstimate activations_checkpointed;

  bool lora() const { return lora_r > 0; }
  // The trained parameters' states (what Strategy::memory() counts).
  double model_states_bytes() const { return param_bytes + grad_bytes + optimizer_bytes; }
  // The device's peak: model states + the frozen base (LoRA) + gathered units
  // + communication buffers + activations during backward. On a CPU device
  // this is host memory too.
  double total_bytes() const {
    return model_states_bytes() + frozen_bytes + frozen_gathered_bytes + gathered_bytes + comm_bytes +
           activations.peak_bytes;
  }
  // What the host holds: offloaded state (GPU), or everything (CPU).
  double host_total_bytes() const { return device_is_cpu ? total_bytes() : host_bytes; }
};

// Per rank, for `run` (parallel.*, train.mixed_precision, train.batch_size,
// data.max_length, model.gradient_checkpointing, model dropout overrides,
// run.device, [lora]) and `model` (num_labels set) at `world_size` ranks.
// Error naming the key for a combination make_strategy() refuses (ddp with
// optimizer offload, hybrid's ranks per node not dividing the world size), or
// for [lora] keys resolve_lora() refuses, or a lora.adapter folder without a
// readable adapter_config.json.
MemoryEstimate estimate_memory(const RunConfig& run, const EncoderConfig& model, int world_size);

// The adapter a LoRA run trains, as train/lora_run.h's attach_lora makes it:
// from the [lora] keys (resolve_lora), or with lora.adapter from its
// adapter_config.json (r, alpha, target_modules, modules_to_save; the weights
// are not read). nullopt without LoRA (lora.r = 0 and no adapter). Errors as
// resolve_lora's, or naming the adapter's adapter_config.json.
std::optional<LoraSpec> run_lora_spec(const RunConfig& run, const EncoderConfig& model);

// What to do about a `capacity` of bytes per rank (device memory on a GPU,
// host memory over the node's ranks on a CPU).
struct MemoryVerdict {
  enum Kind { kFits, kFitsWithCheckpointing, kFitsWithOffload, kFitsWithBoth, kDoesNotFit } kind = kDoesNotFit;
  // The largest train.batch_size that fits as configured (0: none;
  // kNoLimitFound: every batch up to the search's cap, 2^40 - 1, fits).
  static constexpr int64_t kNoLimitFound = -1;
  int64_t largest_batch = 0;
  std::string text() const;   // "fits", "fits with model.gradient_checkpointing", ...
};
MemoryVerdict judge_memory(const RunConfig& run, const EncoderConfig& model, int world_size, double capacity);

// Error unless `ranks_on_node` ranks of the job's estimate fit `capacity`
// bytes of `what` ("host memory (MemAvailable 20.1 GiB)", "GPU memory free").
// The message gives the estimate's parts and names what would fit: another
// parallel.strategy, model.gradient_checkpointing, parallel.offload_optimizer,
// or the largest train.batch_size. With run.memory_check = false the same
// message is a warning (rank 0) and the job starts.
void check_estimate_fits(const RunConfig& run, const EncoderConfig& model, int world_size, int ranks_on_node,
                         double capacity, const std::string& what);

// One line for logs: "memory per rank (estimate, ddp, 1 ranks, no): parameters
// 1.2 GiB, ..."; with LoRA "(estimate, zero3, 4 ranks, bf16, LoRA r 8: 296.4 K
// parameters trained, 108.0 M frozen): ..., frozen base 51.5 MiB (...)".
std::string describe_estimate(const MemoryEstimate& e);

// The estimate as one JSON object (no newline): strategy, world_size,
// mixed_precision, model_states_bytes, total_bytes and every part.
std::string estimate_to_json(const MemoryEstimate& e, const std::optional<MemoryVerdict>& verdict);

}  // namespace shardtrain
