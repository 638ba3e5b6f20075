// One data-parallel training step of TaskModel, timed
// through the real training path: the strategy of --strategy (default ddp,
// DataParallel in parallel/ddp.h; zero1/zero2/zero3/fsdp/hybrid as
// make_strategy builds them, --offload-optimizer for DeepSpeed's
// offload_optimizer.device = "cpu") over an MpiCommunicator on MPI_COMM_WORLD
// (NCCL with --device cuda), in exactly the Trainer's step sequence
//   zero_grad, prepare_backward(true), forward + loss, loss.backward(),
//   finish_backward(), step(lr, max_grad_norm)
// on synthetic batches: token ids uniform in [1, vocab) from a seeded generator
// (different per rank), token types 0, full attention mask, labels 0/1;
// dropout as in the model config (train mode, seeded per rank).
//
// Check before timing: after the warm-up steps the loss and the gradient norm
// are finite on every rank, and every rank's flat parameter buffer is
// bit-identical to rank 0's (rank 0's is broadcast and compared with
// at::equal). Otherwise the job aborts with a message.
//
// Peak: each rank first measures its own matrix-product peak, fp32
// at::mm_out of --peak-size square matrices (FLOP = 2 n^3), best of 5 runs
// after 2 warm-ups, with all ranks running at once (barrier before), which is
// what training sees; the job's peak is the sum over ranks. With --device cuda
// the product runs on the rank's GPU (synchronised around each run), in
// torch's default fp32 mode (TF32 off unless the environment turns it on).
//
// --device cuda (a build with CUDA LibTorch and NCCL): the model, the batches
// and the strategy's buffers live on the rank's GPU (node-local rank modulo the
// visible GPUs, as the Trainer picks it) and the gradients are all-reduced by
// an NcclCommunicator. Each phase ends with a device synchronisation so that
// the host clock measures GPU work; this removes the overlap of one step's
// optimizer with the next step's forward that an unsynchronised loop may get.
//
// Model FLOPs per step (legend: R ranks, B per-rank batch, L sequence length,
// D hidden, I intermediate, N layers, C labels; S = B R global samples,
// T = S L global tokens):
//   forward  = 2 * N (4 D^2 + 2 D I) * T        non-embedding matmul weights
//                                               (Q, K, V, attention output,
//                                               intermediate, output)
//            + 2 * 2 * N * S * L^2 * D          attention scores Q K^T and
//                                               probabilities x V
//            + 2 * S * (D^2 + D C)              pooler and classifier ([CLS] only)
//   training = 3 * forward                      (backward = 2 x forward)
// Embedding lookups, LayerNorm, softmax, GELU, dropout and AdamW are not counted.
//   MFU = training FLOPs / median step time / job peak
//
// The peak is measured under the run's own binding: in this process, with its
// affinity mask and thread count, which the header prints per rank (a rank
// pinned to one core measures one core's peak, and its steps run there too).
//
// Step time is the slowest rank's, per step. It is split into
//   fwd_bwd   zero_grad + forward + loss + backward (bucket all-reduces launched
//             from the gradient hooks overlap this part), itself split into
//             forward (zero_grad + forward + loss) and backward
//   finish    finish_backward(): launching the remaining reductions and waiting
//   optim     step(): global-norm clipping + AdamW (+ the post-step gathers;
//             with offload: waiting for the gradient copies, AdamW on the
//             CPU, the copies back)
// and rank 0 prints min/median/max of each, samples/s and tokens/s (global,
// at the median step time), the MFU, the strategy's reduction counters and
// the bytes it holds per rank (with offload: how much in host memory).
//
//   mpirun -np R bench_train_step [--model quickstart|bert-base|PATH/config.json]
//       [--strategy ddp|zero1|zero2|zero3|fsdp|hybrid] [--offload-optimizer]
//       [--device cpu|cuda] [--batch-size 16] [--seq-len 128] [--steps 10]
//       [--warmup 2] [--peak-size 2048] [--seed 42] [--json FILE] [--profile TRACE.json]
//       [--attention-block-threshold N]
//
// --profile writes one more step after the timed ones as a Chrome trace (torch's legacy
// autograd profiler, every ATen op with its time; benchmarks/profile_summary.py
// sums it per op). The profiler adds a few microseconds per op to that step.
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/cuda.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "shardtrain/comm/mpi_communicator.h"
#include "shardtrain/core/cpu_features.h"
#if SHARDTRAIN_HAVE_NCCL
#include "shardtrain/comm/nccl_communicator.h"
#endif
#include "shardtrain/comm/world.h"
#include "bench_util.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/optim/adamw.h"
#include "shardtrain/parallel/ddp.h"
#include "shardtrain/data/collator.h"
#include "shardtrain/parallel/make_strategy.h"
#include "shardtrain/train/train_step.h"

namespace bench_train_step {  // every benchmark's code lives in its own namespace: they compile together (benchmarks/CMakeLists.txt)

using namespace shardtrain;

namespace {

using shardtrain_bench::Clock;
using shardtrain_bench::max_over_ranks;
using shardtrain_bench::seconds_since;
using shardtrain_bench::Summary;
using shardtrain_bench::summarize;
using shardtrain_bench::to_json;

EncoderConfig resolve_model(const std::string& model) {
  if (model == "quickstart") return EncoderConfig::from_file(std::string(SHARDTRAIN_SOURCE_DIR) + "/configs/models/bert_tiny.json");
  if (model == "bert-base") return bert_base_cased_config();  // model/bert.h
  return EncoderConfig::from_file(model);
}

// Waits for the device's queued work (nothing to wait for on the CPU).
void sync_device(const at::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

// GFLOP/s of this process's best fp32 n x n matrix product on `device`.
double measure_matmul_gflops(int64_t n, const at::Device& device, MPI_Comm comm) {
  auto gen = at::detail::createCPUGenerator(7);
  const at::Tensor a = at::randn({n, n}, gen, at::TensorOptions().dtype(at::kFloat)).to(device);
  const at::Tensor b = at::randn({n, n}, gen, at::TensorOptions().dtype(at::kFloat)).to(device);
  at::Tensor c = at::empty({n, n}, a.options());
  for (int i = 0; i < 2; ++i) at::mm_out(c, a, b);
  sync_device(device);
  ST_CHECK_MPI(MPI_Barrier(comm));
  double best_s = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto start = Clock::now();
    at::mm_out(c, a, b);
    sync_device(device);
    best_s = std::min(best_s, seconds_since(start));
  }
  // A quick sanity check that the product was computed: one entry against a dot product.
  const double expected = at::dot(a[0], b.select(1, 0)).item<double>();
  const double got = c[0][0].item<double>();
  ST_ASSERT(std::abs(got - expected) <= 1e-3 * (1.0 + std::abs(expected)), "matmul peak: wrong product");
  return 2.0 * static_cast<double>(n) * n * n / best_s / 1e9;
}

// Training FLOPs of one optimizer step for the whole job (formula in the header).
struct FlopCount {
  double matmul = 0, attention = 0, head = 0;
  double forward() const { return matmul + attention + head; }
  double training() const { return 3.0 * forward(); }
};

FlopCount count_flops(const EncoderConfig& c, int64_t global_samples, int64_t seq_len) {
  const double D = static_cast<double>(c.hidden_size), I = static_cast<double>(c.intermediate_size);
  const double N = static_cast<double>(c.num_hidden_layers), C = static_cast<double>(c.num_labels);
  const double S = static_cast<double>(global_samples), L = static_cast<double>(seq_len);
  FlopCount f;
  f.matmul = 2.0 * N * (4.0 * D * D + 2.0 * D * I) * S * L;
  f.attention = 2.0 * 2.0 * N * S * L * L * D;
  f.head = 2.0 * S * (D * D + D * C);
  return f;
}

int run(World& world, int argc, char** argv) {
  CLI::App app{"Data-parallel training step of TaskModel: samples/s, tokens/s, MFU"};
  std::string model_name = "quickstart", device_name = "cpu", json_path;
  int64_t batch_size = 16, seq_len = 128, peak_size = 2048, seed = 42;
  int steps = 10, warmup = 2;
  app.add_option("--model", model_name, "quickstart (configs/models/bert_tiny.json), bert-base, or a HF config.json");
  std::string strategy_name = "ddp";
  bool offload = false;
  app.add_option("--strategy", strategy_name, "ddp, zero1, zero2, zero3, fsdp or hybrid (parallel.strategy)")
      ->check(CLI::IsMember({"ddp", "zero1", "zero2", "zero3", "fsdp", "hybrid"}));
  app.add_flag("--offload-optimizer", offload, "parallel.offload_optimizer = \"cpu\" (not with ddp)");
  std::string mixed_precision_name = "no";
  app.add_option("--mixed-precision", mixed_precision_name,
                 "no (fp32), bf16, or fp16 (CUDA; a static loss scale of 2^16): train.mixed_precision")
      ->check(CLI::IsMember({"no", "bf16", "fp16"}));
  app.add_option("--device", device_name, "cpu, or cuda (needs a build with CUDA LibTorch and NCCL)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--batch-size", batch_size, "samples per rank per step")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--seq-len", seq_len, "tokens per sample")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--steps", steps, "timed steps")->check(CLI::Range(1, 1000000));
  app.add_option("--warmup", warmup, "untimed steps before the check and the timing")->check(CLI::Range(1, 1000000));
  app.add_option("--peak-size", peak_size, "n of the n x n fp32 matmul that measures the peak")
      ->check(CLI::Range(int64_t{64}, int64_t{16384}));
  app.add_option("--seed", seed, "seed of the weights and the synthetic batches");
  app.add_option("--json", json_path, "write the results here (rank 0)");
  std::string profile_path;
  int64_t block_threshold = -1;
  app.add_option("--attention-block-threshold", block_threshold,
                 "score elements above which attention runs in blocks of query rows (0: always; default: the model's)");
  app.add_option("--profile", profile_path, "after the timed steps, profile one more: a Chrome trace (rank 0)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (world.rank() == 0) return app.exit(e);
    return e.get_exit_code();
  }

  const EncoderConfig config = resolve_model(model_name);
  if (seq_len > config.max_position_embeddings)
    throw Error(str_format("--seq-len %lld exceeds the model's max_position_embeddings (%lld)",
                           static_cast<long long>(seq_len), static_cast<long long>(config.max_position_embeddings)));
  if (config.num_labels < 2 || config.problem_type == "regression" || config.problem_type == "multi_label_classification")
    throw Error("--model: the benchmark uses labels 0/1 and needs a single-label classifier with num_labels >= 2");

  at::set_num_threads(world.num_threads());
  const int rank = world.rank(), ranks = world.size();
  at::Device device = at::kCPU;
  std::unique_ptr<Communicator> communicator;
  if (device_name == "cuda") {
#if SHARDTRAIN_HAVE_NCCL && SHARDTRAIN_TORCH_CUDA
    MPI_Comm node = MPI_COMM_NULL;
    ST_CHECK_MPI(MPI_Comm_split_type(world.comm(), MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    int local_rank = 0;
    ST_CHECK_MPI(MPI_Comm_rank(node, &local_rank));
    ST_CHECK_MPI(MPI_Comm_free(&node));
    const int gpu = NcclCommunicator::device_for_local_rank(local_rank);
    device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(gpu));
    communicator = std::make_unique<NcclCommunicator>(world.comm(), gpu);
#else
    throw Error("--device cuda: this build has no CUDA LibTorch and NCCL");
#endif
  } else {
    communicator = std::make_unique<MpiCommunicator>(world.comm());
  }
  Communicator& comm = *communicator;

  // ---- peak ----
  const double rank_gflops = measure_matmul_gflops(peak_size, device, world.comm());
  std::vector<double> all_gflops(static_cast<size_t>(ranks));
  ST_CHECK_MPI(MPI_Allgather(&rank_gflops, 1, MPI_DOUBLE, all_gflops.data(), 1, MPI_DOUBLE, world.comm()));
  double job_peak_gflops = 0;
  for (double g : all_gflops) job_peak_gflops += g;
  world.log_binding();

  // ---- model, strategy, data ----
  auto model = std::make_shared<TaskModel>(config);
  model->init_weights(static_cast<uint64_t>(seed));
  if (device.is_cuda()) model->to(device);
  model->train();
  model->set_attention_block_threshold(block_threshold);
  // Dropout draws from the global generator: seeded per rank, so runs repeat and ranks draw different masks.
  at::manual_seed(static_cast<uint64_t>(seed) * 1000003u + 500009u + static_cast<uint64_t>(rank));
  if (device.is_cuda()) torch::cuda::manual_seed(static_cast<uint64_t>(seed) * 1000003u + 500009u + static_cast<uint64_t>(rank));
  AdamWOptions adamw;
  ParallelConfig parallel;
  parallel.strategy = parse_enum<StrategyKind>(strategy_name, "--strategy");
  parallel.offload_optimizer = offload ? OffloadDevice::kCpu : OffloadDevice::kNone;
  const Topology topology = Topology::detect(world.comm(), parallel);
  const Precision mixed_precision = parse_enum<Precision>(mixed_precision_name, "--mixed-precision");
  if (mixed_precision == Precision::kFp16 && !device.is_cuda())
    throw Error("--mixed-precision fp16 needs --device cuda (LibTorch's CPU kernels have no fp16 matmul); use bf16");
  std::unique_ptr<Strategy> strategy =
      make_strategy(parallel, topology, *model, comm, adamw, mixed_precision_for(mixed_precision, parallel));
  strategy->broadcast_parameters(0);
  const auto* ddp = dynamic_cast<const DataParallel*>(strategy.get());
  const std::string strategy_label = strategy->name() + (offload ? " + optimizer offload" : "") +
                                     (mixed_precision != Precision::kNo ? " + " + mixed_precision_name : "");
  const double lr = adamw.lr, max_grad_norm = 1.0;

  // A few distinct batches per rank, cycled (regenerating them would time the RNG).
  const int num_batches = std::min(warmup + steps, 8);
  std::vector<Batch> batches;
  auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(seed) * 1000003u + static_cast<uint64_t>(rank));
  const auto long_options = at::TensorOptions().dtype(at::kLong);
  for (int i = 0; i < num_batches; ++i) {
    Batch b;
    b.input_ids = at::randint(1, config.vocab_size, {batch_size, seq_len}, gen, long_options);
    b.token_type_ids = at::zeros({batch_size, seq_len}, long_options);
    b.attention_mask = at::ones({batch_size, seq_len}, long_options);
    b.labels = at::randint(0, 2, {batch_size}, gen, long_options);
    if (device.is_cuda()) {
      b.input_ids = b.input_ids.to(device);
      b.token_type_ids = b.token_type_ids.to(device);
      b.attention_mask = b.attention_mask.to(device);
      b.labels = b.labels.to(device);
    }
    batches.push_back(b);
  }

  const int64_t global_samples = batch_size * ranks, global_tokens = global_samples * seq_len;
  const FlopCount flops = count_flops(config, global_samples, seq_len);
  if (rank == 0) {
    std::printf("# bench_train_step: device %s, model %s (D %lld, layers %lld, heads %lld, I %lld, vocab %lld, %lld parameters)\n",
                device.str().c_str(), model_name.c_str(), static_cast<long long>(config.hidden_size),
                static_cast<long long>(config.num_hidden_layers), static_cast<long long>(config.num_attention_heads),
                static_cast<long long>(config.intermediate_size), static_cast<long long>(config.vocab_size),
                static_cast<long long>(config.num_parameters()));
    std::printf("# CPU features (cpuid): %s\n", current_cpu_features().describe().c_str());
    std::printf("# %d ranks x %d threads, batch %lld per rank (global %lld samples, %lld tokens), seq_len %lld, "
                "dropout %.2f/%.2f, %s, %d warm-up + %d timed steps\n",
                ranks, at::get_num_threads(), static_cast<long long>(batch_size), static_cast<long long>(global_samples),
                static_cast<long long>(global_tokens), static_cast<long long>(seq_len), config.hidden_dropout_prob,
                config.attention_probs_dropout_prob,
                ddp ? str_format("DDP %zu buckets", ddp->buckets().size()).c_str() : strategy_label.c_str(), warmup,
                steps);
    std::printf("# peak: fp32 mm %lldx%lld, best of 5, all ranks at once, each under its own binding (rank 0: cores "
                "%s, %d threads; all ranks: stderr): per rank",
                static_cast<long long>(peak_size), static_cast<long long>(peak_size), world.cpu_list().c_str(),
                at::get_num_threads());
    for (double g : all_gflops) std::printf(" %.1f", g);
    std::printf(" GFLOP/s; job peak (sum) %.1f GFLOP/s\n", job_peak_gflops);
    std::printf("# FLOP/step = 3 x forward; forward = 2 N (4D^2 + 2DI) T + 4 N S L^2 D + 2 S (D^2 + DC)\n");
    std::printf("#   = 3 x (%.4g matmul + %.4g attention + %.4g pooler/classifier) = %.4g FLOP\n", flops.matmul,
                flops.attention, flops.head, flops.training());
    std::fflush(stdout);
  }

  // ---- steps ----
  struct StepTimes {
    double forward = 0, fwd_bwd = 0, finish = 0, optim = 0, loss = 0, grad_norm = 0;
  };
  auto timed_step = [&](int index) {
    const Batch& b = batches[static_cast<size_t>(index % num_batches)];
    Clock::time_point at[4];
    StepOptions step_options;
    step_options.lr = lr;
    step_options.max_grad_norm = max_grad_norm;
    if (mixed_precision == Precision::kFp16) step_options.loss_scale = 65536.0;
    step_options.at_point = [&](StepPoint point) {
      sync_device(device);
      at[static_cast<int>(point)] = Clock::now();
    };
    const auto start = Clock::now();
    const StepResult result = train_step(*strategy, *model, {b}, step_options);
    StepTimes t;
    t.forward = std::chrono::duration<double>(at[0] - start).count();
    t.fwd_bwd = std::chrono::duration<double>(at[1] - start).count();
    t.finish = std::chrono::duration<double>(at[2] - at[1]).count();
    t.optim = std::chrono::duration<double>(at[3] - at[2]).count();
    t.loss = result.loss;
    t.grad_norm = result.grad_norm;
    return t;
  };

  StepTimes last;
  for (int i = 0; i < warmup; ++i) last = timed_step(i);

  // ---- check ----
  {
    const int finite = std::isfinite(last.loss) && std::isfinite(last.grad_norm) ? 1 : 0;
    if (world.min_over_ranks(finite) == 0)
      fatal("bench_train_step", __FILE__, __LINE__,
            str_format("after %d warm-up steps the loss (%g) or gradient norm (%g) is not finite on some rank "
                       "(this rank: %d)",
                       warmup, last.loss, last.grad_norm, rank));
    // flat_params() gathers the shards of a sharded strategy: a collective, called once on every rank.
    const at::Tensor params = strategy->flat_params();
    at::Tensor reference = params.clone();
    comm.broadcast(reference, 0);
    const int identical = at::equal(reference, params) ? 1 : 0;
    if (world.min_over_ranks(identical) == 0) {
      // Name the rank that is furthest from rank 0 (rank 0 reports, the others wait for the abort).
      struct {
        double diff;
        int rank;
      } local{(reference - params).abs().max().item<double>(), rank}, worst{};
      ST_CHECK_MPI(MPI_Reduce(&local, &worst, 1, MPI_DOUBLE_INT, MPI_MAXLOC, 0, world.comm()));
      if (rank == 0)
        fatal("bench_train_step", __FILE__, __LINE__,
              str_format("after %d warm-up steps the parameters differ between ranks: rank %d differs from rank 0 "
                         "by max |diff| %g",
                         warmup, worst.rank, worst.diff));
      ST_CHECK_MPI(MPI_Barrier(world.comm()));  // never completes: rank 0 aborts the job
    }
    if (rank == 0) {
      std::printf("# check after warm-up: loss %.4f and grad norm %.4f finite on every rank; flat parameters "
                  "(%lld elements) bit-identical on all %d ranks\n",
                  last.loss, last.grad_norm, static_cast<long long>(params.numel()), ranks);
      std::fflush(stdout);
    }
  }

  // ---- timing ----
  const StrategyStats before = strategy->stats();
  std::vector<double> step_s, forward_s, backward_s, fwd_bwd_s, finish_s, optim_s;
  std::vector<double> losses;
  comm.barrier();
  const auto timed_start = Clock::now();
  for (int i = 0; i < steps; ++i) {
    const StepTimes t = timed_step(warmup + i);
    step_s.push_back(t.fwd_bwd + t.finish + t.optim);
    forward_s.push_back(t.forward);
    backward_s.push_back(t.fwd_bwd - t.forward);
    fwd_bwd_s.push_back(t.fwd_bwd);
    finish_s.push_back(t.finish);
    optim_s.push_back(t.optim);
    losses.push_back(t.loss);
  }
  const double timed_total_s = max_over_ranks({seconds_since(timed_start)}, world.comm())[0];
  if (!profile_path.empty()) {
    // One more step, untimed, under the profiler on rank 0 (the others run it unprofiled).
    std::unique_ptr<torch::autograd::profiler::RecordProfile> profile;
    if (rank == 0) profile = std::make_unique<torch::autograd::profiler::RecordProfile>(profile_path);
    timed_step(warmup + steps);
  }
  const StrategyStats after = strategy->stats();
  const Summary step = summarize(max_over_ranks(step_s, world.comm()));
  const Summary forward = summarize(max_over_ranks(forward_s, world.comm()));
  const Summary backward = summarize(max_over_ranks(backward_s, world.comm()));
  const Summary fwd_bwd = summarize(max_over_ranks(fwd_bwd_s, world.comm()));
  const Summary finish = summarize(max_over_ranks(finish_s, world.comm()));
  const Summary optim = summarize(max_over_ranks(optim_s, world.comm()));
  for (double l : losses)
    if (!std::isfinite(l)) fatal("bench_train_step", __FILE__, __LINE__, "a timed step produced a non-finite loss");

  const double samples_per_s = static_cast<double>(global_samples) / step.median;
  const double tokens_per_s = static_cast<double>(global_tokens) / step.median;
  const double model_gflops = flops.training() / step.median / 1e9;
  const double mfu = model_gflops / job_peak_gflops;
  const StrategyMemory memory = strategy->memory();
  const double buckets_per_step = static_cast<double>(after.buckets_total - before.buckets_total) / steps;
  const double buckets_in_backward_per_step =
      static_cast<double>(after.buckets_during_backward - before.buckets_during_backward) / steps;

  if (rank == 0) {
    std::printf("# times in ms: slowest rank per step; fwd_bwd = forward (zero_grad+forward+loss) + backward, "
                "finish = finish_backward, optim = clip+AdamW\n");
    std::printf("%-10s %10s %10s %10s\n", "part", "min_ms", "median_ms", "max_ms");
    auto row = [](const char* name, const Summary& s) {
      std::printf("%-10s %10.2f %10.2f %10.2f\n", name, s.min * 1e3, s.median * 1e3, s.max * 1e3);
    };
    row("step", step);
    row("forward", forward);
    row("backward", backward);
    row("fwd_bwd", fwd_bwd);
    row("finish", finish);
    row("optim", optim);
    std::printf("throughput at the median step: %.2f samples/s, %.0f tokens/s (global); %d steps in %.3f s\n",
                samples_per_s, tokens_per_s, steps, timed_total_s);
    std::printf("model FLOP/s %.2f GFLOP/s = MFU %.1f%% of the measured job peak %.1f GFLOP/s\n", model_gflops,
                100.0 * mfu, job_peak_gflops);
    std::printf("%s: %.1f gradient reductions per step, %.1f of them launched during backward\n",
                strategy_label.c_str(), buckets_per_step, buckets_in_backward_per_step);
    std::printf("held per rank: parameters %.1f MB, gradients %.1f MB, optimizer state %.1f MB (%.1f MB of it in host "
                "memory), peak gathered %.1f MB\n",
                memory.param_bytes / 1e6, memory.grad_bytes / 1e6, memory.optimizer_bytes / 1e6, memory.host_bytes / 1e6,
                memory.peak_transient_bytes / 1e6);
    std::fflush(stdout);
  }

  if (rank == 0 && !json_path.empty()) {
    nlohmann::json doc = {
        {"benchmark", "bench_train_step"},
        {"model", model_name},
        {"device", device.str()},
        {"config",
         {{"hidden_size", config.hidden_size},
          {"num_hidden_layers", config.num_hidden_layers},
          {"num_attention_heads", config.num_attention_heads},
          {"intermediate_size", config.intermediate_size},
          {"vocab_size", config.vocab_size},
          {"num_labels", config.num_labels},
          {"num_parameters", config.num_parameters()},
          {"hidden_dropout_prob", config.hidden_dropout_prob},
          {"attention_probs_dropout_prob", config.attention_probs_dropout_prob}}},
        {"ranks", ranks},
        {"threads_per_rank", at::get_num_threads()},
        {"rank0_cpus", world.cpu_list()},
        {"batch_size_per_rank", batch_size},
        {"seq_len", seq_len},
        {"global_samples_per_step", global_samples},
        {"global_tokens_per_step", global_tokens},
        {"warmup", warmup},
        {"steps", steps},
        {"check", "after warm-up: loss and grad norm finite on every rank, flat params bit-identical to rank 0's"},
        {"peak",
         {{"method", str_format("fp32 at::mm %lldx%lld, best of 5 after 2 warm-ups, all ranks at once",
                                static_cast<long long>(peak_size), static_cast<long long>(peak_size))},
          {"per_rank_gflops", all_gflops},
          {"job_gflops", job_peak_gflops}}},
        {"flops_per_step",
         {{"formula", "3 * (2 N (4D^2 + 2DI) T + 4 N S L^2 D + 2 S (D^2 + D C)); T, S global tokens, samples"},
          {"matmul_forward", flops.matmul},
          {"attention_forward", flops.attention},
          {"head_forward", flops.head},
          {"training", flops.training()}}},
        {"time_s",
         {{"step", to_json(step)}, {"forward", to_json(forward)}, {"backward", to_json(backward)},
          {"fwd_bwd", to_json(fwd_bwd)}, {"finish_backward", to_json(finish)},
          {"optimizer", to_json(optim)}, {"timed_total", timed_total_s}}},
        {"samples_per_s", samples_per_s},
        {"tokens_per_s", tokens_per_s},
        {"model_gflops", model_gflops},
        {"mfu", mfu},
        {"strategy",
         {{"name", strategy->name()},
          {"offload_optimizer", offload},
          {"mixed_precision", mixed_precision_name},
          {"cpu_features", current_cpu_features().describe()},
          {"ddp_buckets", ddp ? static_cast<int64_t>(ddp->buckets().size()) : 0},
          {"reductions_per_step", buckets_per_step},
          {"reductions_during_backward_per_step", buckets_in_backward_per_step},
          {"param_bytes", memory.param_bytes},
          {"grad_bytes", memory.grad_bytes},
          {"optimizer_bytes", memory.optimizer_bytes},
          {"host_bytes", memory.host_bytes},
          {"peak_transient_bytes", memory.peak_transient_bytes}}},
        {"losses", losses}};
    std::ofstream out(json_path);
    if (!out) throw Error("--json: cannot write " + json_path);
    out << doc.dump(2) << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return shardtrain_bench::bench_main("bench_train_step", argc, argv, run); }

}  // namespace bench_train_step

SHARDTRAIN_BENCH_REGISTER(bench_train_step)
