// Sampling: which examples each rank sees, for training and for evaluation.
//
// Training (DistributedSampler, like torch.utils.data.DistributedSampler):
//   * each epoch the example order is a permutation seeded with seed + epoch
//     (SplitMix64 Fisher-Yates, implemented here, so it is bit-identical on every
//     platform and rank), or 0..N-1 when shuffle is off;
//   * the order is cut into global batches of G = batch_size * world_size;
//     rank r takes positions r, r+W, r+2W, ... of each global batch. One global
//     step therefore covers the same examples whatever the world size: -np 1 with
//     batch 4B sees exactly what -np 4 with batch B sees, step by step;
//   * remainder: drop_last drops the incomplete last global batch; otherwise the
//     order is padded to a whole number of global batches by repeating from the
//     start of the permutation (cyclically if needed). torch pads only to a
//     multiple of W and lets the last batch be short; padding to a full global
//     batch keeps every rank's batch at batch_size and keeps the world-size
//     invariance for the last step too, at the cost of at most G-1 repeats;
//   * optional length bucketing (bucket_window_batches > 0, lengths given): in
//     each window of that many global batches the examples are sorted by length
//     (stable) and re-cut, then the window's batches are shuffled (seeded), which
//     cuts padding while every example keeps its one place in the epoch;
//     data.group_by_length turns it on (apply_group_by_length below);
//   * state() = (epoch, global batches consumed) is all a checkpoint needs;
//     load_state() resumes the exact same sequence.
//
//   SamplerOptions options;
//   options.num_examples = N; options.batch_size = 16;
//   options.world_size = world.size(); options.rank = world.rank(); options.seed = 42;
//   DistributedSampler sampler(options);
//   for (int64_t epoch = 0; epoch < E; ++epoch) {
//     sampler.set_epoch(epoch);
//     std::vector<int64_t> batch;
//     while (sampler.next(&batch)) { ... }
//   }
//
// Evaluation (EvalPlan, Accelerate's even_batches + gather_for_metrics):
//   the examples 0..N-1, in order, are cut into global batches; in global batch
//   k rank r takes a contiguous block, so the rank-major concatenation of a step
//   is the examples in order. Every rank runs the same number of batches of the
//   same sizes; the last global batch is padded (by repeating from example 0) up
//   to a multiple of W only. After gathering every rank's results in rank order,
//   drop_eval_padding() returns each example's result exactly once, in original
//   order, for any N and W. gather_for_metrics() does the MPI gather as well.
#pragma once

#include <mpi.h>

#include <ATen/core/Tensor.h>
#include <cstdint>
#include <vector>

#include "shardtrain/core/check.h"
#include "shardtrain/core/run_config.h"

namespace shardtrain {

// SplitMix64 (Steele, Lea, Flood 2014): a tiny generator with a fixed output
// sequence for a given seed on every platform.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next();
  // Uniform in [0, bound) without modulo bias (rejection sampling); bound > 0.
  uint64_t below(uint64_t bound);

 private:
  uint64_t state_;
};

// A permutation of 0..n-1 by Fisher-Yates driven by SplitMix64(seed).
std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed);

// Reorders `order` (size a multiple of batch_size) window by window: each window
// of `window_batches` batches is sorted by lengths[example] (stable, ascending),
// re-cut into batches, and those batches are shuffled with `seed`. The multiset
// of examples in each window is unchanged.
std::vector<int64_t> bucket_by_length(const std::vector<int64_t>& order, const std::vector<int64_t>& lengths,
                                      int64_t batch_size, int64_t window_batches, uint64_t seed);

struct SamplerOptions {
  int64_t num_examples = 0;
  int64_t batch_size = 1;  // per rank
  int world_size = 1;
  int rank = 0;
  bool shuffle = true;
  uint64_t seed = 42;
  bool drop_last = false;
  int64_t bucket_window_batches = 0;  // 0 = no length bucketing
  std::vector<int64_t> lengths;       // per example; required when bucketing
};

// data.group_by_length (Hugging Face TrainingArguments' name): the length
// bucketing above, with the window of HF's LengthGroupedSampler (its
// "megabatch"): min(num_examples / (4 G), 50) global batches, at least 1,
// G = batch_size * world_size. It changes which rows share a batch, not which
// rows an epoch covers: per-step losses and the trained model differ from a
// run without it (the same global batch still gives the same batches at any
// world size). Reads options->num_examples, batch_size and world_size, which
// must be set; sets bucket_window_batches and lengths (clears them when the
// key is off). Throws Error when lengths has not one entry per example.
//
//   SamplerOptions options;  ...num_examples, batch_size, world_size, rank, seed...
//   apply_group_by_length(config.data, dataset.lengths(), &options);
void apply_group_by_length(const DataConfig& data, const std::vector<int64_t>& lengths, SamplerOptions* options);

// Where a sampler stands: checkpoint this, load_state() it to resume.
struct SamplerState {
  int64_t epoch = 0;
  int64_t batches_consumed = 0;  // global batches already handed out this epoch
};

class DistributedSampler {
 public:
  // Throws Error for batch_size < 1, world_size < 1, rank outside [0, W), or
  // bucketing without one length per example.
  explicit DistributedSampler(SamplerOptions options);

  int64_t global_batch_size() const { return options_.batch_size * options_.world_size; }
  // Global batches per epoch; also the number of batches every rank gets.
  int64_t num_batches() const { return num_batches_; }
  const SamplerOptions& options() const { return options_; }

  // Moves to the start of `epoch` (recomputes the epoch's order).
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return state_.epoch; }

  // The epoch's global order after shuffle, padding/truncation and bucketing:
  // num_batches() * global_batch_size() example indices.
  const std::vector<int64_t>& epoch_order() const { return order_; }
  // Global batch k of this epoch, in global order (G examples).
  std::vector<int64_t> global_batch(int64_t k) const;
  // This rank's part of global batch k (batch_size examples).
  std::vector<int64_t> batch(int64_t k) const;

  // This rank's next batch; false (and `indices` untouched) at the end of the
  // epoch. Call set_epoch() to start the next one.
  bool next(std::vector<int64_t>* indices);

  SamplerState state() const { return state_; }
  // Resumes at (epoch, batches_consumed): next() continues exactly where an
  // uninterrupted run would. Throws Error if batches_consumed > num_batches().
  void load_state(const SamplerState& state);

 private:
  SamplerOptions options_;
  int64_t num_batches_ = 0;
  SamplerState state_;
  std::vector<int64_t> order_;
};

// ---- evaluation sharding -----------------------------------------------------

struct EvalPlan {
  int64_t num_examples = 0;
  int64_t batch_size = 1;       // per rank
  int world_size = 1;
  int64_t num_batches = 0;      // per rank, the same on every rank
  int64_t last_batch_size = 0;  // per rank, of the final batch (<= batch_size)

  // Results each rank produces: (num_batches - 1) * batch_size + last_batch_size.
  int64_t per_rank_count() const;
};

// Plans the eval shards; throws Error for batch_size < 1 or world_size < 1.
EvalPlan make_eval_plan(int64_t num_examples, int64_t batch_size, int world_size);

// Example indices rank `rank` evaluates in its batch k (padding repeats from 0).
std::vector<int64_t> eval_batch(const EvalPlan& plan, int rank, int64_t k);
// All of rank's batches, in order.
std::vector<std::vector<int64_t>> eval_batches(const EvalPlan& plan, int rank);

// For the rank-order concatenation of every rank's results (rank 0's
// per_rank_count() results, then rank 1's, ...): selection[i] is the position
// in it of example i's result. Every example appears exactly once.
std::vector<int64_t> eval_gather_selection(const EvalPlan& plan);

// Drops the padding from rank-order gathered results: returns num_examples *
// values_per_example values, example i's values at [i * vpe, (i+1) * vpe).
template <class T>
std::vector<T> drop_eval_padding(const EvalPlan& plan, const std::vector<T>& gathered,
                                 int64_t values_per_example = 1) {
  const int64_t vpe = values_per_example;
  if (static_cast<int64_t>(gathered.size()) != plan.per_rank_count() * plan.world_size * vpe)
    throw Error("drop_eval_padding: gathered results do not match the eval plan");
  std::vector<int64_t> selection = eval_gather_selection(plan);
  std::vector<T> result(plan.num_examples * vpe);
  for (int64_t i = 0; i < plan.num_examples; ++i)
    for (int64_t v = 0; v < vpe; ++v) result[i * vpe + v] = gathered[selection[i] * vpe + v];
  return result;
}

// The same from results tagged with their example index, in any order and with
// duplicates: keeps the first value seen for each index and returns them ordered
// by index. Throws Error if an example in [0, num_examples) has no result.
template <class T>
std::vector<T> dedup_by_example_index(const std::vector<int64_t>& example_indices, const std::vector<T>& values,
                                      int64_t num_examples, int64_t values_per_example = 1) {
  const int64_t vpe = values_per_example;
  if (static_cast<int64_t>(values.size()) != static_cast<int64_t>(example_indices.size()) * vpe)
    throw Error("dedup_by_example_index: one index per example result expected");
  std::vector<T> result(num_examples * vpe);
  std::vector<char> seen(num_examples, 0);
  for (size_t n = 0; n < example_indices.size(); ++n) {
    int64_t i = example_indices[n];
    if (i < 0 || i >= num_examples) throw Error("dedup_by_example_index: example index out of range");
    if (seen[i]) continue;
    seen[i] = 1;
    for (int64_t v = 0; v < vpe; ++v) result[i * vpe + v] = values[n * vpe + v];
  }
  for (int64_t i = 0; i < num_examples; ++i)
    if (!seen[i]) throw Error("dedup_by_example_index: no result for example " + std::to_string(i));
  return result;
}

// Gathers every rank's eval results over `comm` (collective; every rank passes
// per_rank_count() * values_per_example values) and returns, on every rank,
// each example's values exactly once in original order.
std::vector<float> gather_for_metrics(const std::vector<float>& local, const EvalPlan& plan, MPI_Comm comm,
                                      int64_t values_per_example = 1);
std::vector<int64_t> gather_for_metrics(const std::vector<int64_t>& local, const EvalPlan& plan, MPI_Comm comm,
                                        int64_t values_per_example = 1);
// Tensor form: `local` is a CPU tensor [per_rank_count(), ...]; returns
// [num_examples, ...] with the same dtype.
at::Tensor gather_for_metrics(const at::Tensor& local, const EvalPlan& plan, MPI_Comm comm);

}  // namespace shardtrain
