#include "shardtrain/data/sampler.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <climits>
#include <numeric>
#include <string>

#include "shardtrain/comm/watchdog.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/memory.h"

namespace shardtrain {

uint64_t SplitMix64::next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t SplitMix64::below(uint64_t bound) {
  // Reject the lowest (2^64 mod bound) values so every residue is equally likely.
  const uint64_t threshold = (0 - bound) % bound;
  uint64_t r;
  do r = next();
  while (r < threshold);
  return r % bound;
}

std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  SplitMix64 rng(seed);
  for (int64_t i = n - 1; i > 0; --i) std::swap(perm[i], perm[rng.below(static_cast<uint64_t>(i) + 1)]);
  return perm;
}

std::vector<int64_t> bucket_by_length(const std::vector<int64_t>& order, const std::vector<int64_t>& lengths,
                                      int64_t batch_size, int64_t window_batches, uint64_t seed) {
  if (batch_size < 1 || window_batches < 1) throw Error("bucket_by_length: batch_size and window must be >= 1");
  const int64_t n = static_cast<int64_t>(order.size());
  if (n % batch_size != 0) throw Error("bucket_by_length: order is not a whole number of batches");
  std::vector<int64_t> result;
  result.reserve(n);
  const int64_t window = batch_size * window_batches;
  // Each window gets its own stream so windows do not depend on each other's sizes.
  SplitMix64 window_seeds(seed ^ 0x5bd1e9955bd1e995ull);
  for (int64_t begin = 0; begin < n; begin += window) {
    const int64_t end = std::min(n, begin + window);
    std::vector<int64_t> slice(order.begin() + begin, order.begin() + end);
    std::stable_sort(slice.begin(), slice.end(),
                     [&](int64_t a, int64_t b) { return lengths[a] < lengths[b]; });
    std::vector<int64_t> batch_order = seeded_permutation((end - begin) / batch_size, window_seeds.next());
    for (int64_t b : batch_order)
      result.insert(result.end(), slice.begin() + b * batch_size, slice.begin() + (b + 1) * batch_size);
  }
  return result;
}

void apply_group_by_length(const DataConfig& data, const std::vector<int64_t>& lengths, SamplerOptions* options) {
  if (!data.group_by_length) {
    options->bucket_window_batches = 0;
    options->lengths.clear();
    return;
  }
  if (static_cast<int64_t>(lengths.size()) != options->num_examples)
    throw Error(str_format("data.group_by_length: %zu lengths for %lld examples", lengths.size(),
                           static_cast<long long>(options->num_examples)));
  const int64_t global_batch = std::max<int64_t>(1, options->batch_size * options->world_size);
  // transformers' get_length_grouped_indices: mega_batch_mult = min(len // (4 * batch), 50), or 1 when 0.
  options->bucket_window_batches = std::max<int64_t>(1, std::min<int64_t>(options->num_examples / (4 * global_batch), 50));
  options->lengths = lengths;
}

DistributedSampler::DistributedSampler(SamplerOptions options) : options_(std::move(options)) {
  if (options_.batch_size < 1) throw Error("sampler: batch_size must be >= 1");
  if (options_.world_size < 1 || options_.rank < 0 || options_.rank >= options_.world_size)
    throw Error(str_format("sampler: rank %d outside world of %d", options_.rank, options_.world_size));
  if (options_.num_examples < 0) throw Error("sampler: negative dataset size");
  if (options_.batch_size > (int64_t{1} << 40) / options_.world_size)
    throw Error(str_format("train.batch_size = %lld x %d ranks: no global batch is that large (at most 2^40 examples)",
                           static_cast<long long>(options_.batch_size), options_.world_size));
  if (options_.bucket_window_batches > 0 &&
      static_cast<int64_t>(options_.lengths.size()) != options_.num_examples)
    throw Error("sampler: length bucketing needs one length per example");
  const int64_t g = global_batch_size();
  num_batches_ = options_.drop_last ? options_.num_examples / g : (options_.num_examples + g - 1) / g;
  // The epoch's order is padded to whole global batches and held in memory: a
  // huge batch size must be refused here, not by the kernel's OOM killer.
  require_memory(8.0 * static_cast<double>(num_batches_) * static_cast<double>(g),
                 str_format("the sampler's order of %lld examples padded to global batches of %lld "
                            "(train.batch_size %lld x %d ranks)",
                            static_cast<long long>(options_.num_examples), static_cast<long long>(g),
                            static_cast<long long>(options_.batch_size), options_.world_size),
                 "; lower train.batch_size");
  set_epoch(0);
}

void DistributedSampler::set_epoch(int64_t epoch) {
  const int64_t n = options_.num_examples;
  std::vector<int64_t> base;
  if (options_.shuffle) {
    base = seeded_permutation(n, options_.seed + static_cast<uint64_t>(epoch));
  } else {
    base.resize(n);
    std::iota(base.begin(), base.end(), 0);
  }
  const int64_t total = num_batches_ * global_batch_size();
  order_.assign(base.begin(), base.begin() + std::min(n, total));
  for (int64_t p = n; p < total; ++p) order_.push_back(base[p % n]);  // pad from the start, cyclically
  if (options_.bucket_window_batches > 0 && total > 0)
    order_ = bucket_by_length(order_, options_.lengths, global_batch_size(), options_.bucket_window_batches,
                              options_.seed + static_cast<uint64_t>(epoch));
  state_.epoch = epoch;
  state_.batches_consumed = 0;
}

std::vector<int64_t> DistributedSampler::global_batch(int64_t k) const {
  ST_ASSERT(k >= 0 && k < num_batches_, "global batch index out of range");
  const int64_t g = global_batch_size();
  return std::vector<int64_t>(order_.begin() + k * g, order_.begin() + (k + 1) * g);
}

std::vector<int64_t> DistributedSampler::batch(int64_t k) const {
  ST_ASSERT(k >= 0 && k < num_batches_, "batch index out of range");
  const int64_t base = k * global_batch_size() + options_.rank;
  std::vector<int64_t> indices(options_.batch_size);
  for (int64_t j = 0; j < options_.batch_size; ++j) indices[j] = order_[base + j * options_.world_size];
  return indices;
}

bool DistributedSampler::next(std::vector<int64_t>* indices) {
  if (state_.batches_consumed >= num_batches_) return false;
  *indices = batch(state_.batches_consumed++);
  return true;
}

void DistributedSampler::load_state(const SamplerState& state) {
  if (state.batches_consumed < 0 || state.batches_consumed > num_batches_)
    throw Error(str_format("sampler state: %lld batches consumed, but an epoch has %lld",
                           static_cast<long long>(state.batches_consumed), static_cast<long long>(num_batches_)));
  set_epoch(state.epoch);
  state_.batches_consumed = state.batches_consumed;
}

// ---- evaluation ----------------------------------------------------------------

int64_t EvalPlan::per_rank_count() const {
  return num_batches == 0 ? 0 : (num_batches - 1) * batch_size + last_batch_size;
}

EvalPlan make_eval_plan(int64_t num_examples, int64_t batch_size, int world_size) {
  if (batch_size < 1) throw Error("eval: batch size must be >= 1");
  if (world_size < 1) throw Error("eval: world size must be >= 1");
  if (num_examples < 0) throw Error("eval: negative dataset size");
  EvalPlan plan;
  plan.num_examples = num_examples;
  plan.batch_size = batch_size;
  plan.world_size = world_size;
  const int64_t g = batch_size * world_size;
  plan.num_batches = (num_examples + g - 1) / g;
  if (plan.num_batches > 0) {
    const int64_t remaining = num_examples - (plan.num_batches - 1) * g;
    plan.last_batch_size = (remaining + world_size - 1) / world_size;
  }
  return plan;
}

namespace {
// Rank's batch k as global positions: contiguous, so a step's rank-major
// concatenation runs through the examples in order.
int64_t eval_batch_start(const EvalPlan& plan, int rank, int64_t k, int64_t* size) {
  *size = k + 1 == plan.num_batches ? plan.last_batch_size : plan.batch_size;
  return k * plan.batch_size * plan.world_size + rank * *size;
}
}  // namespace

std::vector<int64_t> eval_batch(const EvalPlan& plan, int rank, int64_t k) {
  ST_ASSERT(k >= 0 && k < plan.num_batches && rank >= 0 && rank < plan.world_size, "eval batch out of range");
  int64_t size = 0;
  const int64_t start = eval_batch_start(plan, rank, k, &size);
  std::vector<int64_t> indices(size);
  for (int64_t j = 0; j < size; ++j) indices[j] = (start + j) % plan.num_examples;
  return indices;
}

std::vector<std::vector<int64_t>> eval_batches(const EvalPlan& plan, int rank) {
  std::vector<std::vector<int64_t>> batches;
  for (int64_t k = 0; k < plan.num_batches; ++k) batches.push_back(eval_batch(plan, rank, k));
  return batches;
}

std::vector<int64_t> eval_gather_selection(const EvalPlan& plan) {
  std::vector<int64_t> selection(plan.num_examples, -1);
  const int64_t per_rank = plan.per_rank_count();
  for (int r = 0; r < plan.world_size; ++r) {
    for (int64_t k = 0; k < plan.num_batches; ++k) {
      int64_t size = 0;
      const int64_t start = eval_batch_start(plan, r, k, &size);
      for (int64_t j = 0; j < size; ++j)
        if (start + j < plan.num_examples) selection[start + j] = r * per_rank + k * plan.batch_size + j;
    }
  }
  for (int64_t s : selection) ST_ASSERT(s >= 0, "eval plan leaves an example uncovered");
  return selection;
}

namespace {

void check_plan_matches(const EvalPlan& plan, MPI_Comm comm) {
  int world_size = 1;
  if (comm != MPI_COMM_NULL) ST_CHECK_MPI(MPI_Comm_size(comm, &world_size));
  ST_ASSERT(world_size == plan.world_size, "eval plan made for a different world size");
}

template <class T>
std::vector<T> gather_vector(const std::vector<T>& local, const EvalPlan& plan, MPI_Comm comm, int64_t vpe,
                             MPI_Datatype type) {
  check_plan_matches(plan, comm);
  const int64_t count = plan.per_rank_count() * vpe;
  if (static_cast<int64_t>(local.size()) != count)
    throw Error(str_format("gather_for_metrics: this rank has %zu values, the eval plan expects %lld",
                           local.size(), static_cast<long long>(count)));
  ST_ASSERT(count <= INT_MAX, "eval results too large for one MPI gather");
  std::vector<T> gathered(count * plan.world_size);
  if (plan.world_size == 1) {
    gathered = local;
  } else {
    PhaseGuard guard(comm, "eval gather (gather_for_metrics)");
    ST_CHECK_MPI(MPI_Allgather(local.data(), static_cast<int>(count), type, gathered.data(),
                               static_cast<int>(count), type, comm));
  }
  return drop_eval_padding(plan, gathered, vpe);
}

}  // namespace

std::vector<float> gather_for_metrics(const std::vector<float>& local, const EvalPlan& plan, MPI_Comm comm,
                                      int64_t values_per_example) {
  return gather_vector(local, plan, comm, values_per_example, MPI_FLOAT);
}

std::vector<int64_t> gather_for_metrics(const std::vector<int64_t>& local, const EvalPlan& plan, MPI_Comm comm,
                                        int64_t values_per_example) {
  return gather_vector(local, plan, comm, values_per_example, MPI_INT64_T);
}

at::Tensor gather_for_metrics(const at::Tensor& local, const EvalPlan& plan, MPI_Comm comm) {
  check_plan_matches(plan, comm);
  TORCH_CHECK(local.device().is_cpu(), "gather_for_metrics: expected a CPU tensor");
  TORCH_CHECK(local.dim() >= 1 && local.size(0) == plan.per_rank_count(),
              "gather_for_metrics: expected ", plan.per_rank_count(), " rows, got ", local.sizes());
  at::Tensor contiguous = local.contiguous();
  const int64_t bytes = contiguous.numel() * contiguous.element_size();
  ST_ASSERT(bytes <= INT_MAX, "eval results too large for one MPI gather");
  std::vector<int64_t> shape = contiguous.sizes().vec();
  shape[0] *= plan.world_size;
  at::Tensor gathered = at::empty(shape, contiguous.options());
  if (plan.world_size == 1) {
    gathered.copy_(contiguous);
  } else {
    PhaseGuard guard(comm, "eval gather (gather_for_metrics)");
    ST_CHECK_MPI(MPI_Allgather(contiguous.data_ptr(), static_cast<int>(bytes), MPI_BYTE, gathered.data_ptr(),
                               static_cast<int>(bytes), MPI_BYTE, comm));
  }
  std::vector<int64_t> selection = eval_gather_selection(plan);
  return gathered.index_select(0, at::tensor(selection, at::kLong));
}

}  // namespace shardtrain
