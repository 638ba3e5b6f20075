// Memory and communication of every parallel strategy against the ZeRO
// paper's formulas (issue #6, "Proof"): for each strategy in --strategies,
// build BERT (bert-base-cased's shape by default) and the strategy with
// make_strategy() on MPI_COMM_WORLD, run --warmup untimed and --steps timed
// optimizer steps in the Trainer's sequence
//   zero_grad, prepare_backward(true), forward + loss, loss.backward(),
//   finish_backward(), step(lr, max_grad_norm = 1)
// (gradient accumulation 1: zero2 / zero3 reduce-scatter on every micro-step,
// DeepSpeed's way, so with accumulation their traffic would scale with the
// micro-steps), then compare what each rank counts with what the formulas say.
//
// Legend: Psi parameters of the model (counted from the model's tensors), N
// ranks, G ranks of a shard group (N; hybrid: --ranks-per-node, default N/2),
// M = N / G replicas (hybrid "nodes").
//
// Memory (bytes one rank holds between steps: Strategy::memory(), max over
// ranks). Everything is fp32, so the ZeRO paper's mixed-precision baseline
// 2 + 2 + K = 16 bytes/param (fp16 params, fp16 grads, K = 12 for the fp32
// master, momentum, variance) becomes 4 + 4 + 8 = 16 bytes/param: fp32 params,
// fp32 grads, AdamW exp_avg + exp_avg_sq, and no master copy (the parameters
// are fp32 already). The formulas, per rank:
//   ddp              baseline        16 Psi
//   zero1            P_os            4 Psi + 4 Psi + 8 Psi / N
//   zero2            P_os+g          4 Psi + (4 + 8) Psi / N
//   zero3, fsdp      P_os+g+p        16 Psi / N  (+ 4 Psi_pers)
//   hybrid           P_os+g+p over G 16 Psi / G  (+ 4 Psi_pers)
// Psi_pers: the parameters below stage3_param_persistence_threshold elements
// (zero3, hybrid; fsdp has none), which every rank keeps whole — counted
// here from the model's tensors, not from the strategy. A row passes when
// memory().total() is within 5% of its formula; any row outside fails the
// benchmark (exit code 1) after every row is printed. The peak gathered
// buffer (memory().peak_transient_bytes: gathered parameters + unsharded
// gradients alive at once) is printed beside the largest unit's parameters.
//
// Communication (bytes one rank sends per step: the delta of
// stats().bytes_sent over the timed steps / steps, ring accounting, max over
// ranks), against the paper's elements per step x 4 bytes:
//   ddp, zero1, zero2  2 Psi (N-1)/N   (all-reduce = reduce-scatter + all-gather)
//   zero3, fsdp        3 Psi (N-1)/N   (forward gather, backward gather, reduce-scatter)
//   hybrid             3 Psi (G-1)/G + 2 (Psi/G) (M-1)/M  (in-node zero3 + all-reduce of the shard across nodes)
// Our zero1 all-reduces the gradients and then all-gathers the parameters
// (parallel/zero.h): 3 Psi (N-1)/N; DeepSpeed's stage 1 reduce-scatters, 2 Psi.
// The benchmark shows the paper's formula and what we send; a row within 5%
// reads "ok", otherwise "DIFF" (communication does not change the exit code).
// zero3 sends a little less than 3 Psi: the head unit stays gathered from its
// forward to its backward, and the persistent parameters are gathered once.
//
// Hidden communication: the strategy's communicator is wrapped in a
// recording Communicator that forwards every collective to an
// MpiCommunicator, logs it (kind, sizes, which sub-communicator) during the
// timed steps, and times every Work::wait() (the time this rank was blocked
// on any collective: exposed communication, including the blocking
// collectives a strategy does not count in stats().seconds_waiting). After
// the timed steps the log is replayed: the same collectives with the same
// sizes through the same communicators (one communicator after another, each
// one's in their order), each one blocking, with no compute, twice; the
// faster replay / steps is the step's communication time alone.
//   hidden share = 1 - exposed / communication time, clamped to [0, 1]
// Blocked time also contains waiting for a slower rank that has not launched
// the collective yet (still computing: load imbalance, a descheduled rank),
// which is not communication. Each rank therefore stamps every collective's
// launch and the start and end of its wait (steady_clock, one clock for all
// processes of a node); after the timed steps the members of each
// communicator take the latest launch of each collective, and a wait splits
// into peer_wait (before the last member launched) and exposed (after: the
// communication this rank did not hide). exposed and peer_wait are the
// largest of any rank. On several nodes the clocks differ: then exposed is the
// whole blocked time (a lower bound on the hidden share) and peer_wait "-".
// The strategy's own stats().seconds_waiting per step is printed beside it
// ("waiting_s"), and the bytes its stats() counts are checked against the
// bytes of the logged collectives.
//
// Check before timing: dropout is off, every strategy starts from the same
// seeded weights and sees the same seeded batches, so each warm-up step's
// loss and gradient norm must agree with the first strategy's within 1e-4
// relative (fp32 reduction order moves them by ~1e-6; a sum instead of an
// average, a lost bucket or a stale shard moves them by > 1e-2), and after the
// warm-up every rank's full parameters (flat_params(), gathered for sharded
// strategies) must be bit-identical to rank 0's. Otherwise the job aborts.
//
//   mpirun -np N bench_sharding [--strategies ddp,zero1,zero2,zero3,fsdp,hybrid]
//       [--model bert-base|quickstart|PATH/config.json] [--batch-size 2] [--seq-len 64]
//       [--warmup 1] [--steps 2] [--ranks-per-node 0 (= N/2)] [--seed 42] [--json FILE]
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "shardtrain/comm/mpi_communicator.h"
#include "shardtrain/comm/world.h"
#include "bench_util.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/run_config.h"
#include "shardtrain/model/bert.h"
#include "shardtrain/optim/adamw.h"
#include "shardtrain/data/collator.h"
#include "shardtrain/parallel/make_strategy.h"
#include "shardtrain/train/train_step.h"

using namespace shardtrain;

namespace {

using shardtrain_bench::Clock;

constexpr double kMemoryTolerance = 0.05;  // the 5%
constexpr double kCheckTolerance = 1e-4;   // loss / grad norm vs the first strategy (see the header)
constexpr double kMB = 1024.0 * 1024.0;

using shardtrain_bench::max_over_ranks;
using shardtrain_bench::seconds_since;
using shardtrain_bench::Summary;
using shardtrain_bench::summarize;
using shardtrain_bench::to_json;

int64_t max_over_ranks(int64_t value, MPI_Comm comm) {
  ST_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT64_T, MPI_MAX, comm));
  return value;
}

BertConfig resolve_model(const std::string& model) {
  BertConfig c = model == "bert-base"    ? bert_base_cased_config()
                 : model == "quickstart" ? BertConfig::from_file(std::string(SHARDTRAIN_SOURCE_DIR) +
                                                                 "/configs/models/bert_tiny.json")
                                         : BertConfig::from_file(model);
  c.hidden_dropout_prob = 0.0;
  c.attention_probs_dropout_prob = 0.0;
  c.classifier_dropout = -1.0;
  c.validate(model);
  return c;
}

// ---- a Communicator that records and times what a strategy does ----

enum class Op { kAllReduce, kReduceScatter, kReduceScatterV, kAllGather, kAllGatherV, kBroadcast, kBarrier };

struct CollectiveRecord {
  int comm_id = 0;
  Op op = Op::kBarrier;
  at::ScalarType dtype = at::kFloat;
  int64_t in_numel = 0, out_numel = 0;
  ReduceOp reduce = ReduceOp::kSum;
  int root = 0;
  std::vector<int64_t> counts;
  int64_t bytes_sent = 0;  // ring accounting (communicator.h bytes_on_wire), this rank
  // steady_clock seconds (CLOCK_MONOTONIC: one clock for every process of a
  // node): when this rank launched it, and when it waited for it (-1: never
  // blocked on it, test() saw it complete).
  double launched = 0, wait_begin = -1, wait_end = -1;
};

double now_s() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

// Shared by a root RecordingCommunicator and every communicator split from it.
struct Recorder {
  bool recording = false;
  std::vector<CollectiveRecord> log;  // while recording
  std::vector<Communicator*> inner;   // by comm_id; they live as long as their wrapper
  double seconds_blocked = 0;         // in Work::wait(), always counted (take deltas)
};

class TimedWork final : public Work {
 public:
  // index: the collective's record in recorder.log, -1 when not recording.
  TimedWork(std::unique_ptr<Work> inner, Recorder& recorder, int64_t index)
      : inner_(std::move(inner)), recorder_(recorder), index_(index) {}
  bool test() override { return inner_->test(); }
  void wait() override {
    const double start = now_s();
    inner_->wait();
    const double end = now_s();
    recorder_.seconds_blocked += end - start;
    if (index_ < 0) return;
    CollectiveRecord& r = recorder_.log[static_cast<size_t>(index_)];
    if (r.wait_begin < 0) r.wait_begin = start;
    r.wait_end = end;
  }

 private:
  std::unique_ptr<Work> inner_;
  Recorder& recorder_;
  int64_t index_;
};

class RecordingCommunicator final : public Communicator {
 public:
  RecordingCommunicator(std::unique_ptr<Communicator> inner, std::shared_ptr<Recorder> recorder)
      : inner_(std::move(inner)), recorder_(std::move(recorder)) {
    id_ = static_cast<int>(recorder_->inner.size());
    recorder_->inner.push_back(inner_.get());
  }
  ~RecordingCommunicator() override { recorder_->inner[static_cast<size_t>(id_)] = nullptr; }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string backend() const override { return inner_->backend(); }

  std::unique_ptr<Work> all_reduce_async(at::Tensor tensor, ReduceOp op) override {
    CollectiveRecord r = record(Op::kAllReduce, tensor, tensor);
    r.reduce = op;
    return finish(r, inner_->all_reduce_async(tensor, op));
  }
  std::unique_ptr<Work> reduce_scatter_async(at::Tensor input, at::Tensor output, ReduceOp op) override {
    CollectiveRecord r = record(Op::kReduceScatter, input, output);
    r.reduce = op;
    return finish(r, inner_->reduce_scatter_async(input, output, op));
  }
  std::unique_ptr<Work> reduce_scatter_v_async(at::Tensor input, at::Tensor output, const std::vector<int64_t>& counts,
                                               ReduceOp op) override {
    CollectiveRecord r = record(Op::kReduceScatterV, input, output);
    r.reduce = op;
    r.counts = counts;
    return finish(r, inner_->reduce_scatter_v_async(input, output, counts, op));
  }
  std::unique_ptr<Work> all_gather_async(at::Tensor input, at::Tensor output) override {
    return finish(record(Op::kAllGather, input, output), inner_->all_gather_async(input, output));
  }
  std::unique_ptr<Work> all_gather_v_async(at::Tensor input, at::Tensor output,
                                           const std::vector<int64_t>& counts) override {
    CollectiveRecord r = record(Op::kAllGatherV, input, output);
    r.counts = counts;
    return finish(r, inner_->all_gather_v_async(input, output, counts));
  }
  std::unique_ptr<Work> broadcast_async(at::Tensor tensor, int root) override {
    CollectiveRecord r = record(Op::kBroadcast, tensor, tensor);
    r.root = root;
    return finish(r, inner_->broadcast_async(tensor, root));
  }
  void barrier() override {
    CollectiveRecord r;
    r.comm_id = id_;
    r.op = Op::kBarrier;
    const double start = now_s();
    inner_->barrier();
    const double end = now_s();
    recorder_->seconds_blocked += end - start;
    r.launched = r.wait_begin = start;
    r.wait_end = end;
    if (recorder_->recording) recorder_->log.push_back(r);
    stats_ = inner_->stats();
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    auto sub = std::make_unique<RecordingCommunicator>(inner_->split(color, key), recorder_);
    stats_ = inner_->stats();
    return sub;
  }

 private:
  CollectiveRecord record(Op op, const at::Tensor& input, const at::Tensor& output) const {
    CollectiveRecord r;
    r.comm_id = id_;
    r.op = op;
    r.dtype = input.scalar_type();
    r.in_numel = input.numel();
    r.out_numel = output.numel();
    return r;
  }
  std::unique_ptr<Work> finish(CollectiveRecord r, std::unique_ptr<Work> work) {
    r.launched = now_s();  // just after the launch (microseconds)
    r.bytes_sent = inner_->stats().bytes_sent - stats_.bytes_sent;
    stats_ = inner_->stats();
    int64_t index = -1;
    if (recorder_->recording) {
      index = static_cast<int64_t>(recorder_->log.size());
      recorder_->log.push_back(r);
    }
    return std::make_unique<TimedWork>(std::move(work), *recorder_, index);
  }

  std::unique_ptr<Communicator> inner_;
  std::shared_ptr<Recorder> recorder_;
  int id_ = 0;
};

// Splits this rank's blocked time over the logged collectives into waiting
// for the last rank to launch a collective and the collective's own exposed
// time after that: {exposed, peer_wait} seconds. A collective cannot finish
// before every member has launched it (max over the members of `launched`,
// reduced through the collective's own communicator); blocked time before
// that is another rank still computing, not communication. Needs one clock
// for all ranks: call it only when every rank is on one node.
std::pair<double, double> split_blocked_time(Recorder& recorder) {
  double exposed = 0, peer_wait = 0;
  for (size_t id = 0; id < recorder.inner.size(); ++id) {
    if (recorder.inner[id] == nullptr) continue;
    std::vector<size_t> mine;
    for (size_t i = 0; i < recorder.log.size(); ++i)
      if (recorder.log[i].comm_id == static_cast<int>(id)) mine.push_back(i);
    // Every member of the communicator logged the same collectives in the same order.
    std::vector<double> last;
    for (size_t i : mine) last.push_back(recorder.log[i].launched);
    recorder.inner[id]->all_reduce(
        at::from_blob(last.data(), {static_cast<int64_t>(last.size())}, at::TensorOptions().dtype(at::kDouble)),
        ReduceOp::kMax);
    for (size_t k = 0; k < mine.size(); ++k) {
      const CollectiveRecord& r = recorder.log[mine[k]];
      if (r.wait_begin < 0) continue;
      const double all_launched = last[k];
      exposed += std::max(0.0, r.wait_end - std::max(r.wait_begin, all_launched));
      peer_wait += std::max(0.0, std::min(r.wait_end, all_launched) - r.wait_begin);
    }
  }
  return {exposed, peer_wait};
}

// Runs the logged collectives again, blocking, with no compute in between;
// returns this rank's seconds (after a barrier on `world`).
double replay(const Recorder& recorder, MPI_Comm world) {
  // One input and one output buffer per dtype, big enough for every record.
  std::map<at::ScalarType, std::pair<int64_t, int64_t>> sizes;
  for (const CollectiveRecord& r : recorder.log) {
    auto& s = sizes[r.dtype];
    s.first = std::max(s.first, r.in_numel);
    s.second = std::max(s.second, r.out_numel);
  }
  std::map<at::ScalarType, std::pair<at::Tensor, at::Tensor>> buffers;
  for (const auto& [dtype, s] : sizes)
    buffers[dtype] = {at::zeros({std::max<int64_t>(s.first, 1)}, at::TensorOptions().dtype(dtype)),
                      at::zeros({std::max<int64_t>(s.second, 1)}, at::TensorOptions().dtype(dtype))};
  // Communicator by communicator, each one's collectives in their order: a
  // rank's log interleaves communicators in the order its collectives were
  // launched, which may differ between ranks (hybrid's cross-node averages
  // start when a reduce-scatter completes); replayed blocking in that order,
  // two ranks could each wait in a collective the other has not reached.
  std::vector<const CollectiveRecord*> order;
  for (size_t id = 0; id < recorder.inner.size(); ++id)
    for (const CollectiveRecord& r : recorder.log)
      if (r.comm_id == static_cast<int>(id)) order.push_back(&r);
  ST_CHECK_MPI(MPI_Barrier(world));
  const double start = MPI_Wtime();
  for (const CollectiveRecord* record : order) {
    const CollectiveRecord& r = *record;
    Communicator* comm = recorder.inner[static_cast<size_t>(r.comm_id)];
    ST_ASSERT(comm != nullptr, "bench_sharding: replay after the strategy's communicator was destroyed");
    if (r.op == Op::kBarrier) {
      comm->barrier();
      continue;
    }
    const auto& [in_buffer, out_buffer] = buffers.at(r.dtype);
    at::Tensor in = in_buffer.narrow(0, 0, r.in_numel);
    at::Tensor out = out_buffer.narrow(0, 0, r.out_numel);
    switch (r.op) {
      case Op::kAllReduce: comm->all_reduce(in, r.reduce); break;
      case Op::kReduceScatter: comm->reduce_scatter(in, out, r.reduce); break;
      case Op::kReduceScatterV: comm->reduce_scatter_v(in, out, r.counts, r.reduce); break;
      case Op::kAllGather: comm->all_gather(in, out); break;
      case Op::kAllGatherV: comm->all_gather_v(in, out, r.counts); break;
      case Op::kBroadcast: comm->broadcast(in, r.root); break;
      case Op::kBarrier: break;
    }
  }
  return MPI_Wtime() - start;
}

// ---- the formulas, from Psi and N only ----

struct ModelCounts {
  int64_t psi = 0;              // parameters
  int64_t psi_persistent = 0;   // parameters of tensors below the persistence threshold
  int64_t largest_unit = 0;     // parameters of the largest forward unit (embeddings, a layer, the head)
};

ModelCounts count_model(const BertForSequenceClassification& model, int64_t persistence_threshold) {
  ModelCounts c;
  std::vector<int64_t> unit_numel(static_cast<size_t>(model.num_units()), 0);
  for (const auto& [name, tensor] : model.state_dict()) {
    c.psi += tensor.numel();
    if (tensor.numel() < persistence_threshold) c.psi_persistent += tensor.numel();
    unit_numel[static_cast<size_t>(model.unit_of(name))] += tensor.numel();
  }
  c.largest_unit = *std::max_element(unit_numel.begin(), unit_numel.end());
  return c;
}

struct Formula {
  std::string memory_name, comm_name;
  double memory_bytes = 0;      // per rank
  double persistent_bytes = 0;  // of memory_bytes: replicated persistent parameters
  double comm_bytes = 0;        // per rank per step (elements x 4)
};

// The ZeRO paper's per-rank bytes (Psi parameters, N ranks, K = 12 bytes of
// optimizer state per parameter), fp32 (parameters and gradients 4 bytes, K =
// 8 for AdamW's moments alone: the parameters are the master) or mixed
// precision (16-bit parameters and gradients, K = 12 with the fp32 master).
Formula zero_formula(const std::string& strategy, const ModelCounts& counts, int n, int group, bool mixed) {
  const double psi = static_cast<double>(counts.psi);
  const double N = n, G = group, M = static_cast<double>(n) / group;
  const double b = mixed ? 2 : 4;  // bytes of a parameter or gradient element
  const double K = mixed ? 12 : 8;
  const double pers = b * static_cast<double>(counts.psi_persistent);
  Formula f;
  auto name = [](double x) { return str_format("%g", x); };
  if (strategy == "ddp") {
    f.memory_name = name(2 * b + K) + " Psi";
    f.memory_bytes = (2 * b + K) * psi;
    f.comm_name = "2 Psi (N-1)/N";
    f.comm_bytes = b * 2 * psi * (N - 1) / N;
  } else if (strategy == "zero1") {
    f.memory_name = "P_os: " + name(2 * b) + " Psi + " + name(K) + " Psi/N";
    f.memory_bytes = 2 * b * psi + K * psi / N;
    f.comm_name = "2 Psi (N-1)/N";
    f.comm_bytes = b * 2 * psi * (N - 1) / N;
  } else if (strategy == "zero2") {
    f.memory_name = "P_os+g: " + name(b) + " Psi + " + name(b + K) + " Psi/N";
    f.memory_bytes = b * psi + (b + K) * psi / N;
    f.comm_name = "2 Psi (N-1)/N";
    f.comm_bytes = b * 2 * psi * (N - 1) / N;
  } else if (strategy == "zero3" || strategy == "fsdp") {
    f.memory_name = "P_os+g+p: 16 Psi/N" + (strategy == "zero3" ? " + " + name(b) + " Psi_pers" : std::string());
    f.persistent_bytes = strategy == "zero3" ? pers : 0.0;
    f.memory_bytes = 16 * psi / N + f.persistent_bytes;
    f.comm_name = "3 Psi (N-1)/N";
    f.comm_bytes = b * 3 * psi * (N - 1) / N;
  } else if (strategy == "hybrid") {
    f.memory_name = "P_os+g+p over G: 16 Psi/G + " + name(b) + " Psi_pers";
    f.persistent_bytes = pers;
    f.memory_bytes = 16 * psi / G + f.persistent_bytes;
    f.comm_name = "3 Psi (G-1)/G + 2 (Psi/G) (M-1)/M";
    f.comm_bytes = b * (3 * psi * (G - 1) / G + 2 * (psi / G) * (M - 1) / M);
  } else {
    throw Error("--strategies: no formula for \"" + strategy + "\"");
  }
  return f;
}

// ---- one strategy ----

struct Row {
  std::string strategy;
  int ranks = 0, group = 0;
  StrategyMemory memory;  // each field the max over ranks
  ModelCounts counts;
  Formula formula;
  double memory_ratio = 0;
  bool memory_pass = false;
  double bytes_sent_per_step = 0;       // stats().bytes_sent delta / steps, max over ranks
  double logged_bytes_per_step = 0;     // the recorded collectives' bytes / steps, max over ranks
  double comm_ratio = 0;                // 0 when the formula is 0 (one rank)
  double seconds_waiting_per_step = 0;  // stats().seconds_waiting delta / steps, max over ranks
  double blocked_per_step = 0;          // time in Work::wait() / steps, max over ranks
  double comm_alone_per_step = 0;       // faster replay / steps, max over ranks
  double comm_exposed_per_step = 0;     // blocked after every rank had launched / steps, max over ranks
  double peer_wait_per_step = 0;        // blocked before the last rank launched / steps, max over ranks
  bool one_node = true;                 // blocked time split by launch times (one clock)
  double hidden_share = -1;             // -1: no communication
  int64_t collectives_per_step = 0;
  double gathers_per_step = 0, prefetched_per_step = 0, reductions_per_step = 0, reductions_in_backward_per_step = 0;
  Summary step_s;
  std::vector<double> warmup_losses, warmup_norms;
};

struct Options {
  std::string model_name = "bert-base";
  int64_t batch_size = 2, seq_len = 64, seed = 42;
  int warmup = 1, steps = 2;
  int ranks_per_node = 0;
  Precision mixed_precision = Precision::kNo;  // --mixed-precision
};

Row run_strategy(World& world, const std::string& name, const BertConfig& config, const std::vector<Batch>& batches,
                 const Options& options, const Row* reference) {
  const int rank = world.rank(), ranks = world.size();
  ParallelConfig parallel;
  parallel.strategy = parse_choice<StrategyKind>(name, "--strategies");
  if (name == "hybrid") parallel.ranks_per_node = options.ranks_per_node > 0 ? options.ranks_per_node : ranks / 2;

  auto model = std::make_shared<BertForSequenceClassification>(config);
  model->init_weights(static_cast<uint64_t>(options.seed));
  model->train();

  Row row;
  row.strategy = name;
  row.ranks = ranks;
  row.group = name == "hybrid" ? static_cast<int>(parallel.ranks_per_node) : ranks;
  row.counts = count_model(*model, name == "fsdp" ? 0 : parallel.zero.stage3_param_persistence_threshold);
  ST_ASSERT(row.counts.psi == config.num_parameters(), "bench_sharding: the model's tensors do not add up to "
                                                       "BertConfig::num_parameters()");
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
  {
    int agree = 1;
    std::string why;
    for (int i = 0; i < options.warmup; ++i) {
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
    const at::Tensor params = strategy->flat_params();  // collective for the sharded strategies
    at::Tensor reference_params = params.clone();
    bench_comm.broadcast(reference_params, 0);
    const int identical = at::equal(reference_params, params) ? 1 : 0;
    if (world.min_over_ranks(identical) == 0)
      fatal("bench_sharding", __FILE__, __LINE__,
            str_format("%s: after %d warm-up steps rank %d's parameters differ from rank 0's by max |diff| %g",
                       name.c_str(), options.warmup, rank, (reference_params - params).abs().max().item<double>()));
  }

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
  const StrategyMemory m = strategy->memory();
  row.memory.param_bytes = max_over_ranks(m.param_bytes, world.comm());
  row.memory.grad_bytes = max_over_ranks(m.grad_bytes, world.comm());
  row.memory.optimizer_bytes = max_over_ranks(m.optimizer_bytes, world.comm());
  row.memory.peak_transient_bytes = max_over_ranks(m.peak_transient_bytes, world.comm());
  const int64_t total = max_over_ranks(m.total(), world.comm());
  row.memory_ratio = static_cast<double>(total) / row.formula.memory_bytes;
  row.memory_pass = std::abs(row.memory_ratio - 1.0) <= kMemoryTolerance;
  return row;
}

std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> items;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) items.push_back(item);
  return items;
}

int run(World& world, int argc, char** argv) {
  CLI::App app{"Per-rank memory and bytes sent of every parallel strategy against the ZeRO paper's formulas"};
  Options options;
  std::string strategies_list = "ddp,zero1,zero2,zero3,fsdp,hybrid", json_path;
  app.add_option("--strategies", strategies_list, "comma-separated strategies (hybrid is skipped on one rank)");
  app.add_option("--model", options.model_name, "bert-base, quickstart (configs/models/bert_tiny.json), or a HF config.json");
  app.add_option("--batch-size", options.batch_size, "samples per rank per step")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--seq-len", options.seq_len, "tokens per sample")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--warmup", options.warmup, "untimed (checked) steps per strategy")->check(CLI::Range(1, 1000000));
  app.add_option("--steps", options.steps, "timed steps per strategy")->check(CLI::Range(1, 1000000));
  app.add_option("--ranks-per-node", options.ranks_per_node, "hybrid: ranks per emulated node; 0 = N/2")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--seed", options.seed, "seed of the weights and the synthetic batches");
  std::string mixed_precision = "no";
  app.add_option("--mixed-precision", mixed_precision, "no (fp32) or bf16: 16-bit parameters, gradients and "
                                                       "communication, fp32 master and AdamW")
      ->check(CLI::IsMember({"no", "bf16"}));
  app.add_option("--json", json_path, "write the results here (rank 0)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (world.rank() == 0) return app.exit(e);
    return e.get_exit_code();
  }
  options.mixed_precision = parse_choice<Precision>(mixed_precision, "--mixed-precision");
  const bool mixed = options.mixed_precision != Precision::kNo;

  const int rank = world.rank(), ranks = world.size();
  std::vector<std::string> names;
  for (const std::string& name : split_list(strategies_list)) {
    const auto known = choice_names<StrategyKind>();
    if (std::find(known.begin(), known.end(), name) == known.end())
      throw Error("--strategies: \"" + name + "\" is not one of ddp, zero1, zero2, zero3, fsdp, hybrid");
    if (name == "hybrid" && ranks < 2) {
      if (rank == 0) std::printf("# hybrid skipped: it needs at least 2 ranks (one shard group per emulated node)\n");
      continue;
    }
    names.push_back(name);
  }
  if (names.empty()) throw Error("--strategies: nothing to run");

  const BertConfig config = resolve_model(options.model_name);
  if (options.seq_len > config.max_position_embeddings)
    throw Error(str_format("--seq-len %lld exceeds the model's max_position_embeddings (%lld)",
                           static_cast<long long>(options.seq_len),
                           static_cast<long long>(config.max_position_embeddings)));
  if (config.num_labels < 2 || config.problem_type == "regression" || config.problem_type == "multi_label_classification")
    throw Error("--model: the benchmark uses labels 0/1 and needs a single-label classifier with num_labels >= 2");
  at::set_num_threads(world.num_threads());

  // The same few batches for every strategy (different per rank).
  std::vector<Batch> batches;
  {
    auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(options.seed) * 1000003u + static_cast<uint64_t>(rank));
    const auto long_options = at::TensorOptions().dtype(at::kLong);
    for (int i = 0; i < std::min(options.warmup + options.steps, 4); ++i) {
      Batch b;
      b.input_ids = at::randint(1, config.vocab_size, {options.batch_size, options.seq_len}, gen, long_options);
      b.token_type_ids = at::zeros({options.batch_size, options.seq_len}, long_options);
      b.attention_mask = at::ones({options.batch_size, options.seq_len}, long_options);
      b.labels = at::randint(0, 2, {options.batch_size}, gen, long_options);
      batches.push_back(b);
    }
  }

  if (rank == 0) {
    std::printf("# bench_sharding: model %s (D %lld, layers %lld, heads %lld, I %lld, vocab %lld), Psi = %lld "
                "parameters, %s, AdamW; dropout off\n",
                options.model_name.c_str(), static_cast<long long>(config.hidden_size),
                static_cast<long long>(config.num_hidden_layers), static_cast<long long>(config.num_attention_heads),
                static_cast<long long>(config.intermediate_size), static_cast<long long>(config.vocab_size),
                static_cast<long long>(config.num_parameters()), mixed ? "mixed precision bf16" : "fp32");
    std::printf("# N = %d ranks x %d threads, batch %lld x seq_len %lld per rank, accumulation 1, %d warm-up + %d "
                "timed steps per strategy\n",
                ranks, at::get_num_threads(), static_cast<long long>(options.batch_size),
                static_cast<long long>(options.seq_len), options.warmup, options.steps);
    std::printf(mixed ? "# ZeRO's mixed-precision 16 bytes/param: 2 params + 2 grads + 12 optimizer (fp32 master + AdamW)\n"
                      : "# fp32 equivalent of ZeRO's 16 bytes/param: 4 params + 4 grads + 8 AdamW (no master copy)\n");
    std::fflush(stdout);
  }

  std::vector<Row> rows;
  rows.reserve(names.size());  // `reference` points into it
  for (const std::string& name : names) {
    const Row* reference = rows.empty() ? nullptr : &rows.front();
    rows.push_back(run_strategy(world, name, config, batches, options, reference));
    if (rank == 0) {
      std::printf("# %s done: check passed (warm-up losses and norms%s, parameters bit-identical on all ranks); "
                  "step median %.2f s\n",
                  name.c_str(), reference ? (" match " + reference->strategy).c_str() : " finite",
                  rows.back().step_s.median);
      std::fflush(stdout);
    }
  }

  bool all_memory_pass = true;
  for (const Row& r : rows) all_memory_pass = all_memory_pass && r.memory_pass;

  if (rank == 0) {
    std::printf("\nMemory per rank (max over ranks, MB = 2^20 bytes) and bytes sent per step against the ZeRO "
                "formulas (memory tolerance %.0f%%):\n",
                100 * kMemoryTolerance);
    std::printf("%-8s %3s %9s %9s %9s %9s %11s %7s %6s %10s %12s %12s %7s %4s %9s %9s %11s %9s %7s\n", "strategy",
                "N", "params", "grads", "optim", "total", "ZeRO_MB", "ratio", "mem", "peak_gath", "sent_MB/step",
                "formula_MB", "ratio", "comm", "waiting_s", "blocked_s", "peer_wait_s", "exposed_s", "hidden");
    for (const Row& r : rows) {
      const bool no_comm = r.formula.comm_bytes <= 0;
      const bool comm_ok = no_comm ? r.bytes_sent_per_step == 0 : std::abs(r.comm_ratio - 1.0) <= kMemoryTolerance;
      std::printf("%-8s %3d %9.1f %9.1f %9.1f %9.1f %11.1f %7.4f %6s %10.1f %12.1f %12.1f %7s %4s %9.3f %9.3f %11s %9.3f "
                  "%7s\n",
                  r.strategy.c_str(), r.ranks, r.memory.param_bytes / kMB, r.memory.grad_bytes / kMB,
                  r.memory.optimizer_bytes / kMB, r.memory.total() / kMB, r.formula.memory_bytes / kMB, r.memory_ratio,
                  r.memory_pass ? "PASS" : "FAIL", r.memory.peak_transient_bytes / kMB, r.bytes_sent_per_step / kMB,
                  r.formula.comm_bytes / kMB, no_comm ? "-" : str_format("%.4f", r.comm_ratio).c_str(),
                  comm_ok ? "ok" : "DIFF", r.seconds_waiting_per_step, r.blocked_per_step,
                  r.one_node ? str_format("%.3f", r.peer_wait_per_step).c_str() : "-", r.comm_exposed_per_step,
                  r.hidden_share < 0 ? "-" : str_format("%.0f%%", 100 * r.hidden_share).c_str());
    }
    std::printf("\nFormulas (Psi = %lld, N = %d):\n", static_cast<long long>(rows.front().counts.psi), ranks);
    for (const Row& r : rows) {
      std::printf("  %-7s G %d  memory %-40s comm %s", r.strategy.c_str(), r.group, r.formula.memory_name.c_str(),
                  r.formula.comm_name.c_str());
      if (r.formula.persistent_bytes > 0)
        std::printf("  (Psi_pers = %lld elements = %.2f MB replicated)",
                    static_cast<long long>(r.counts.psi_persistent), r.formula.persistent_bytes / kMB);
      std::printf("\n");
    }
    std::printf("\nPer step (timed steps; step time = slowest rank):\n");
    std::printf("%-8s %10s %10s %10s %11s %9s %11s %9s %9s %13s %14s\n", "strategy", "step_min_s", "step_med_s",
                "step_max_s", "collectives", "gathers", "prefetched", "reduces", "in_bwd", "comm_alone_s",
                "largest_unit_MB");
    for (const Row& r : rows)
      std::printf("%-8s %10.3f %10.3f %10.3f %11lld %9.1f %11.1f %9.1f %9.1f %13.3f %14.1f\n", r.strategy.c_str(),
                  r.step_s.min, r.step_s.median, r.step_s.max, static_cast<long long>(r.collectives_per_step),
                  r.gathers_per_step, r.prefetched_per_step, r.reductions_per_step, r.reductions_in_backward_per_step,
                  r.comm_alone_per_step, 4.0 * static_cast<double>(r.counts.largest_unit) / kMB);
    // stats().bytes_sent must be exactly what the strategy put through its communicators.
    for (const Row& r : rows)
      if (std::llround(r.bytes_sent_per_step) != std::llround(r.logged_bytes_per_step))
        std::printf("WARNING %s: stats().bytes_sent counts %.0f bytes/step, its collectives sent %.0f bytes/step\n",
                    r.strategy.c_str(), r.bytes_sent_per_step, r.logged_bytes_per_step);
    std::printf("\nmemory: %s\n", all_memory_pass ? "every strategy within 5% of its ZeRO formula"
                                                  : "FAIL: some strategy is more than 5% off its ZeRO formula");
    std::fflush(stdout);
  }

  if (rank == 0 && !json_path.empty()) {
    nlohmann::json out_rows = nlohmann::json::array();
    for (const Row& r : rows) {
      out_rows.push_back(
          {{"strategy", r.strategy},
           {"ranks", r.ranks},
           {"shard_group", r.group},
           {"memory_bytes",
            {{"params", r.memory.param_bytes},
             {"grads", r.memory.grad_bytes},
             {"optimizer", r.memory.optimizer_bytes},
             {"total", r.memory.total()},
             {"peak_transient", r.memory.peak_transient_bytes}}},
           {"memory_formula", r.formula.memory_name},
           {"memory_formula_bytes", r.formula.memory_bytes},
           {"memory_persistent_bytes", r.formula.persistent_bytes},
           {"memory_ratio", r.memory_ratio},
           {"memory_pass", r.memory_pass},
           {"bytes_sent_per_step", r.bytes_sent_per_step},
           {"collective_bytes_per_step", r.logged_bytes_per_step},
           {"comm_formula", r.formula.comm_name},
           {"comm_formula_bytes", r.formula.comm_bytes},
           {"comm_ratio", r.comm_ratio},
           {"seconds_waiting_per_step", r.seconds_waiting_per_step},
           {"seconds_blocked_per_step", r.blocked_per_step},
           {"comm_alone_seconds_per_step", r.comm_alone_per_step},
           {"peer_wait_seconds_per_step", r.one_node ? nlohmann::json(r.peer_wait_per_step) : nlohmann::json(nullptr)},
           {"comm_exposed_seconds_per_step", r.comm_exposed_per_step},
           {"hidden_share", r.hidden_share < 0 ? nlohmann::json(nullptr) : nlohmann::json(r.hidden_share)},
           {"collectives_per_step", r.collectives_per_step},
           {"gathers_per_step", r.gathers_per_step},
           {"gathers_prefetched_per_step", r.prefetched_per_step},
           {"reductions_per_step", r.reductions_per_step},
           {"reductions_during_backward_per_step", r.reductions_in_backward_per_step},
           {"largest_unit_params", r.counts.largest_unit},
           {"persistent_params", r.counts.psi_persistent},
           {"step_s", to_json(r.step_s)},
           {"warmup_losses_rank0", r.warmup_losses},
           {"warmup_grad_norms", r.warmup_norms}});
    }
    nlohmann::json doc = {{"benchmark", "bench_sharding"},
                          {"model", options.model_name},
                          {"num_parameters", config.num_parameters()},
                          {"ranks", ranks},
                          {"threads_per_rank", at::get_num_threads()},
                          {"batch_size_per_rank", options.batch_size},
                          {"seq_len", options.seq_len},
                          {"gradient_accumulation_steps", 1},
                          {"warmup", options.warmup},
                          {"steps", options.steps},
                          {"bytes_per_param", {{"params", 4}, {"grads", 4}, {"adamw", 8}}},
                          {"memory_tolerance", kMemoryTolerance},
                          {"memory_pass", all_memory_pass},
                          {"rows", out_rows}};
    std::ofstream out(json_path);
    if (!out) throw Error("--json: cannot write " + json_path);
    out << doc.dump(2) << "\n";
  }
  return all_memory_pass ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  World world(&argc, &argv);
  try {
    return run(world, argc, argv);
  } catch (const Error& e) {
    if (world.rank() == 0) std::fprintf(stderr, "bench_sharding: %s\n", e.what());
    return 2;
  }
}
