// Preflight: checks of a run that need the model's config and the run config
// together, made before anything large is allocated.
//
//   EncoderConfig model = ...;  model.set_num_labels(num_labels);
//   check_model_for_data(model, config.data, model_source);          // type_vocab_size vs text_b
//   const MemoryEstimate need = estimate_rank_memory(config, model, world_size);
//   check_memory_fits(need, config, model, ranks_on_node, available_memory());  // Error naming the keys
//
// The estimate is per rank, fp32, Psi = EncoderConfig::num_parameters(), N ranks
// (the README's strategy table; S = the ranks of one parameter shard: N, or
// parallel.ranks_per_node for hybrid):
//   model build   8 Psi    the model, and the flat buffer its parameters move into
//   ddp          16 Psi    parameters, gradients, AdamW exp_avg and exp_avg_sq
//   zero1        8 Psi + 8 Psi / N
//   zero2        4 Psi + 12 Psi / N
//   zero3, fsdp  16 Psi / S + 3 x 4 x the largest unit (gathered parameters and
//   hybrid                   gradients of a unit, and the next one prefetched)
// plus activations kept for backward, per encoder layer (B = train.batch_size,
// L = data.max_length, D hidden, I intermediate, H heads, 4 bytes a value):
//   4 (16 B L D + 2 B L I + 3 B H L^2) + B H L^2   (the last: dropout masks)
// (what autograd keeps of a layer: Q, K, V, the attention probabilities before
// and after dropout, the dense and LayerNorm inputs and outputs, the FFN's
// pre- and post-activation, with room for the copies of reshaped tensors) for
// num_hidden_layers + 2 layers (the embeddings, and backward's working set),
// and one layer of train.eval_batch_size in
// evaluation, whichever is larger, plus the label names (48 bytes a label).
// The peak is max(model build, the strategy's state + activations).
// Measured: the quickstart model (D 128, I 512, H 2, 2 layers) at -np 1 grows
// its peak resident memory by 4.89 MiB per example from batch 1 to batch 256
// (`/usr/bin/time -f %M shardtrain train --config configs/quickstart.toml
// --train.max_steps 3 --train.batch_size B`: 288 MiB, 1535 MiB), where the
// batches are padded to 105-111 tokens (MRPC's longest pair); the formula gives
// 6.0-6.4 MiB per example at those lengths and 7.6 MiB at data.max_length 128,
// which it uses. It is a bound to refuse hopeless runs, not an exact account.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "shardtrain/core/memory.h"
#include "shardtrain/core/run_config.h"
#include "shardtrain/model/encoder_config.h"

namespace shardtrain {

// Error when the model cannot take the data: sentence pairs (data.text_b set)
// need token type 1, i.e. type_vocab_size >= 2. `model_source` names the
// model's config.json for the message.
void check_model_for_data(const EncoderConfig& model, const DataConfig& data, const std::string& model_source);

struct MemoryEstimate {
  double parameters = 0;   // Psi
  double build_bytes = 0;  // building the model and moving it into flat buffers
  double state_bytes = 0;  // parameters, gradients, optimizer state the strategy keeps
  double transient_bytes = 0;   // zero3 / fsdp / hybrid: gathered units
  double activation_bytes = 0;  // kept for backward (or eval), per micro-batch
  double label_bytes = 0;
  double total_bytes = 0;  // the peak: max(build, state + transient + activations) + labels
  std::string strategy;
};

// Per rank, for `config` (strategy, batch sizes, max_length) and `model` (its
// num_labels already set), at `world_size` ranks.
MemoryEstimate estimate_rank_memory(const RunConfig& config, const EncoderConfig& model, int world_size);

// Error when `ranks_on_node` ranks of `need` do not fit in `available`
// (nothing when it is unknown), naming the bytes and the keys to change:
//   this run needs about 27.9 GiB of host memory per rank (x 2 ranks on this
//   node = 55.8 GiB), but 20.1 GiB are available (MemAvailable 20.1 GiB):
//   activations 27.0 GiB (train.batch_size 100000000000 x data.max_length 128),
//   ... Lower train.batch_size ...
void check_memory_fits(const MemoryEstimate& need, const RunConfig& config, const EncoderConfig& model, int ranks_on_node,
                       const std::optional<AvailableMemory>& available);

}  // namespace shardtrain
