#include "sharding/run_strategy.h"

#include <ATen/ATen.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "sharding/hidden_communication.h"
#include "sharding/recording_communicator.h"
#include "shardtrain/comm/mpi_communicator.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/run_config.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/optim/adamw.h"
#include "shardtrain/parallel/make_strategy.h"
#include "shardtrain/train/train_step.h"

using namespace shardtrain;

namespace shardtrain_bench::sharding {
namespace {

constexpr double kCheckTolerance = 1e-4;  // loss / grad norm vs the first strategy (see run_strategy.h)

using shardtrain_bench::max_over_ranks;

int64_t max_over_ranks(int64_t value, MPI_Comm comm) {
  ST_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT64_T, MPI_MAX, comm));
  return value;
}

// The check before timing (run_strategy.h): every rank's warm-up losses and
// norms finite and within kCheckTolerance of `reference`'s, and every rank's
// parameters bit-identical to rank 0's; otherwise the job aborts.
void check_warmup(World& world, const std::string& name, const Row& row, const Row* reference, int warmup,
                  Strategy& strategy, Communicator& bench_comm) {
  const int rank = world.rank();
  int agree = 1;
  std::string why;
  for (int i = 0; i < warmup; ++i) {
    const double loss = row.warmup_losses[static_cast<size_t>(i)], norm = row.warmup_norms[static_cast<size_t>(i)];
    if (!std::isfinite(loss) || !std::isfinite(norm)) {
      agree = 0;
      why = str_format("warm-up step %d: loss %g or gradient norm %g is not finite", i + 1, loss, norm);
      break;
    }
    if (reference == nullptr) continue;
    const double ref_loss = reference->warmup_losses[static_cast<size_t>(i)];
    const double ref_norm = reference->warmup_norms[static_cast<size_t>(i)];
    if (std::abs(loss - ref_loss) > kCheckTolerance * std::abs(ref_loss) ||
        std::abs(norm - ref_norm) > kCheckTolerance * std::abs(ref_norm)) {
      agree = 0;
      why = str_format("warm-up step %d: loss %.8g, gradient norm %.8g; %s had %.8g, %.8g (relative tolerance %g)",
                       i + 1, loss, norm, reference->strategy.c_str(), ref_loss, ref_norm, kCheckTolerance);
      break;
    }
  }
  if (world.min_over_ranks(agree) == 0) {
    if (!agree) fatal("bench_sharding", __FILE__, __LINE__, name + " on rank " + std::to_string(rank) + ": " + why);
    ST_CHECK_MPI(MPI_Barrier(world.comm()));  // never completes: the failing rank aborts the job
  }
  const at::Tensor params = strategy.flat_params();  // collective for the sharded strategies
  at::Tensor reference_params = params.clone();
  bench_comm.broadcast(reference_params, 0);
  const int identical = at::equal(reference_params, params) ? 1 : 0;
  if (world.min_over_ranks(identical) == 0)
    fatal("bench_sharding", __FILE__, __LINE__,
          str_format("%s: after %d warm-up steps rank %d's parameters differ from rank 0's by max |diff| %g",
                     name.c_str(), warmup, rank, (reference_params - params).abs().max().item<double>()));
}

// Memory held between steps, each field the max over ranks, against the formula.
void measure_memory(const Strategy& strategy, MPI_Comm comm, Row& row) {
  const StrategyMemory m = strategy.memory();
  row.memory.param_bytes = max_over_ranks(m.param_bytes, comm);
  row.memory.grad_bytes = max_over_ranks(m.grad_bytes, comm);
  row.memory.optimizer_bytes = max_over_ranks(m.optimizer_bytes, comm);
  row.memory.peak_transient_bytes = max_over_ranks(m.peak_transient_bytes, comm);
  const int64_t total = max_over_ranks(m.total(), comm);
  row.memory_ratio = static_cast<double>(total) / row.formula.memory_bytes;
  row.memory_pass = std::abs(row.memory_ratio - 1.0) <= kMemoryTolerance;
}

}  // namespace

Row run_strategy(World& world, const std::string& name, const EncoderConfig& config, const std::vector<Batch>& batches,
                 const Options& options, const Row* reference) {
  const int ranks = world.size();
  ParallelConfig parallel;
  parallel.strategy = parse_enum<StrategyKind>(name, "--strategies");
  if (name == "hybrid") parallel.ranks_per_node = options.ranks_per_node > 0 ? options.ranks_per_node : ranks / 2;

  auto model = std::make_shared<TaskModel>(config);
  model->init_weights(static_cast<uint64_t>(options.seed));
  model->train();

  Row row;
  row.strategy = name;
  row.ranks = ranks;
  row.group = name == "hybrid" ? static_cast<int>(parallel.ranks_per_node) : ranks;
  row.counts = count_model(*model, name == "fsdp" ? 0 : parallel.zero.stage3_param_persistence_threshold);
  ST_ASSERT(row.counts.psi == config.num_parameters(), "bench_sharding: the model's tensors do not add up to "
                                                       "EncoderConfig::num_parameters()");
  row.formula = zero_formula(name, row.counts, ranks, row.group, options.mixed_precision != Precision::kNo);

  auto recorder = std::make_shared<Recorder>();
  RecordingCommunicator comm(std::make_unique<MpiCommunicator>(world.comm()), recorder);
  MpiCommunicator bench_comm(world.comm());  // the benchmark's own collectives, outside the strategy's counters
  AdamWOptions adamw;
  const Topology topology = Topology::detect(world.comm(), parallel);
  std::unique_ptr<Strategy> strategy =
      make_strategy(parallel, topology, *model, comm, adamw, mixed_precision_for(options.mixed_precision, parallel));
  strategy->broadcast_parameters(0);
  const double lr = adamw.lr, max_grad_norm = 1.0;

  struct TimedStep {
    double seconds = 0, loss = 0, grad_norm = 0;
  };
  StepOptions step_options;
  step_options.lr = lr;
  step_options.max_grad_norm = max_grad_norm;
  auto timed_step = [&](int index) {
    const Batch& b = batches[static_cast<size_t>(index) % batches.size()];
    const auto start = Clock::now();
    const StepResult result = train_step(*strategy, *model, {b}, step_options);
    TimedStep r;
    r.seconds = seconds_since(start);
    r.grad_norm = result.grad_norm;
    r.loss = result.loss;
    return r;
  };

  // ---- warm-up and check ----
  for (int i = 0; i < options.warmup; ++i) {
    const TimedStep r = timed_step(i);
    // The loss is this rank's batch; the norm is global. Compare rank by rank.
    row.warmup_losses.push_back(r.loss);
    row.warmup_norms.push_back(r.grad_norm);
  }
  check_warmup(world, name, row, reference, options.warmup, *strategy, bench_comm);

  // ---- timed steps ----
  const StrategyStats before = strategy->stats();
  const double blocked_before = recorder->seconds_blocked;
  std::vector<double> step_s;
  ST_CHECK_MPI(MPI_Barrier(world.comm()));
  recorder->recording = true;
  for (int i = 0; i < options.steps; ++i) {
    const TimedStep r = timed_step(options.warmup + i);
    if (!std::isfinite(r.loss)) fatal("bench_sharding", __FILE__, __LINE__, name + ": a timed step's loss is not finite");
    step_s.push_back(r.seconds);
  }
  recorder->recording = false;
  const StrategyStats after = strategy->stats();
  const double blocked_s = recorder->seconds_blocked - blocked_before;
  row.step_s = summarize(max_over_ranks(step_s, world.comm()));
  row.one_node = world.local_size() == world.size();
  // On several nodes the clocks differ: all blocked time counts as exposed.
  const auto [comm_exposed_s, peer_wait_s] =
      row.one_node ? split_blocked_time(*recorder) : std::pair<double, double>{blocked_s, 0.0};

  int64_t logged_bytes = 0;
  for (const CollectiveRecord& r : recorder->log) logged_bytes += r.bytes_sent;
  const double replay_s = std::min(replay(*recorder, world.comm()), replay(*recorder, world.comm()));

  const double steps = options.steps;
  const std::vector<double> per_step = max_over_ranks(
      {static_cast<double>(after.bytes_sent - before.bytes_sent) / steps, static_cast<double>(logged_bytes) / steps,
       (after.seconds_waiting - before.seconds_waiting) / steps, blocked_s / steps, replay_s / steps,
       static_cast<double>(recorder->log.size()) / steps, static_cast<double>(after.gathers_total - before.gathers_total) / steps,
       static_cast<double>(after.gathers_prefetched - before.gathers_prefetched) / steps,
       static_cast<double>(after.buckets_total - before.buckets_total) / steps,
       static_cast<double>(after.buckets_during_backward - before.buckets_during_backward) / steps,
       comm_exposed_s / steps, peer_wait_s / steps},
      world.comm());
  row.bytes_sent_per_step = per_step[0];
  row.logged_bytes_per_step = per_step[1];
  row.seconds_waiting_per_step = per_step[2];
  row.blocked_per_step = per_step[3];
  row.comm_alone_per_step = per_step[4];
  row.collectives_per_step = static_cast<int64_t>(std::llround(per_step[5]));
  row.gathers_per_step = per_step[6];
  row.prefetched_per_step = per_step[7];
  row.reductions_per_step = per_step[8];
  row.reductions_in_backward_per_step = per_step[9];
  row.comm_exposed_per_step = per_step[10];
  row.peer_wait_per_step = per_step[11];
  row.comm_ratio = row.formula.comm_bytes > 0 ? row.bytes_sent_per_step / row.formula.comm_bytes : 0.0;
  if (row.bytes_sent_per_step > 0 && row.comm_alone_per_step > 0)
    row.hidden_share = std::clamp(1.0 - row.comm_exposed_per_step / row.comm_alone_per_step, 0.0, 1.0);

  // ---- memory held between steps ----
  measure_memory(*strategy, world.comm(), row);
  return row;
}

}  // namespace shardtrain_bench::sharding
