// LoRA against full fine-tuning (issue 44): step time, peak memory and
// checkpoint size, for bert-base and a large model, one process each, the
// same batch.
//
// Each (model, mode) runs in a fresh child process (fork; the parent never
// starts MPI, the child starts its own World, a one-rank MPI job), one after
// the other, full fine-tuning first, so that no mode's freed memory counts
// in another's. Within a child, everything is the training job's
// path: TaskModel with init_weights; for LoRA attach_lora (train/lora_run.h:
// r --lora-r on --lora-targets, the classifier trained as modules_to_save,
// lora.dropout 0) and frozen_to(fp32), as build_strategy does; make_strategy
// (ddp) over an MpiCommunicator of the one rank; then train_step()
// (zero_grad, forward + loss, backward, finish_backward, step(lr, clip 1)) on
// synthetic full-length batches (token ids uniform in [1, vocab) from a
// seeded generator, token types 0, labels 0/1; dropout 0.1 as in the model
// config; the packed forward, model.unpadded's default).
//
// Check before timing: after the warm-up steps the loss and gradient norm are
// finite; under LoRA the frozen base is unchanged (each frozen tensor's sum,
// in float64, equal to its sum before the steps) and every lora_B moved off
// its zero init; the strategy holds exactly the trained parameters that the
// memory estimate counts. The checkpoint's file is at least its flat state
// (trained numel x (4 + 4 + 4): /model, /optim/exp_avg, /optim/exp_avg_sq).
//
// Reported per mode:
//   step       min / median / max ms of the timed steps, split as
//              bench_train_step splits them (fwd_bwd, optim); and the median
//              of the process's CPU time per step (all threads), which other
//              processes on the machine disturb much less than the wall clock
//              (with one thread it is the step's own work);
//   memory     hwm: the child's resident high-water mark (VmHWM) over its
//              resident size before the model was built, for the whole mode
//              (building the model included: World keeps freed memory in the
//              heap, so this is what the process held); step: the same for
//              one more training step after the timed ones, with the heap's
//              free pages handed back first (malloc_trim) and VmHWM reset, so
//              that what building the model freed does not count; states: the
//              strategy's StrategyMemory (parameters, gradients, AdamW state)
//              plus the frozen base's bytes; est: the memory estimate's total
//              for the same run (train/memory_estimate.h: ddp, 1 rank, cpu,
//              packed rows);
//   checkpoint the bytes on disk of write_train_checkpoint() of the
//              strategy's flat state (the parameters and AdamW's moments a
//              training checkpoint holds, with TrainState's attributes but no
//              vocabulary or config text), written to --checkpoint-dir and
//              removed; and the seconds the write took.
// and LoRA / full for each, measured in the same run.
//
//   bench_lora [--models bert-base:8,large:4] [--seq-len 128] [--warmup 1] [--steps 3]
//              [--lora-r 8] [--lora-targets query,value] [--checkpoint-dir /tmp] [--json FILE]
//
// Run it without mpirun (each child is a one-rank MPI job of its own);
// threads per child: OMP_NUM_THREADS, else the affinity mask's cores
// (comm/world.h), e.g. `taskset -c 0,1 build/benchmarks/bench_lora`; on a
// machine others are using, OMP_NUM_THREADS=1 (benchmarks/README.md).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "shardtrain/checkpoint/flat_state.h"
#include "shardtrain/comm/mpi_communicator.h"
#include "shardtrain/comm/world.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/cpu_features.h"
#include "shardtrain/core/log.h"
#include "shardtrain/data/collator.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/parallel/make_strategy.h"
#include "shardtrain/train/lora_run.h"
#include "shardtrain/train/memory_estimate.h"
#include "shardtrain/train/train_checkpoint.h"
#include "shardtrain/train/train_step.h"

namespace bench_lora {  // every benchmark's code lives in its own namespace: they compile together (benchmarks/CMakeLists.txt)

using namespace shardtrain;

namespace {

using shardtrain_bench::Clock;
using shardtrain_bench::seconds_since;
using shardtrain_bench::Summary;
using shardtrain_bench::summarize;

// A /proc/self/status field in bytes ("VmRSS", "VmHWM").
double lora_status_bytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.compare(0, field.size() + 1, field + ":") == 0) return std::stod(line.substr(field.size() + 1)) * 1024.0;
  throw Error("/proc/self/status has no " + field);
}

// CPU time of this process, every thread.
double lora_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

void lora_reset_peak() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";  // resets VmHWM to the current resident size (Linux >= 4.0)
  clear.flush();
  if (!clear) throw Error("cannot write /proc/self/clear_refs (needed to reset the peak, VmHWM)");
}

EncoderConfig lora_model_config(const std::string& name) {
  if (name == "bert-base") return bert_base_cased_config(2);
  if (name == "large") {  // bert-large-cased's shape
    EncoderConfig c = bert_base_cased_config(2);
    c.hidden_size = 1024;
    c.num_hidden_layers = 24;
    c.num_attention_heads = 16;
    c.intermediate_size = 4096;
    return c;
  }
  EncoderConfig c = EncoderConfig::from_file(name);
  c.set_num_labels(2);
  return c;
}

struct Options {
  int64_t seq_len = 128, lora_r = 8, seed = 42;
  int warmup = 1, steps = 3;
  std::vector<std::string> lora_targets = {"query", "value"};
  std::string checkpoint_dir = "/tmp";
};

// What a child sends back through its pipe (plain data).
struct ModeResult {
  int ok = 0;
  int threads = 0;
  int64_t trained = 0, frozen = 0;
  double step_min = 0, step_median = 0, step_max = 0, fwd_bwd_median = 0, optim_median = 0, cpu_median = 0;
  double loss = 0;
  double baseline_rss = 0, peak_bytes = 0, step_peak_bytes = 0, states_bytes = 0, estimate_bytes = 0;
  double checkpoint_bytes = 0, checkpoint_state_bytes = 0, checkpoint_write_s = 0;
};

LoraConfig lora_config(const Options& o) {
  LoraConfig lora;
  lora.r = o.lora_r;
  lora.target_modules = o.lora_targets;
  return lora;
}

std::vector<Batch> lora_batches(const EncoderConfig& config, int64_t B, int64_t L, uint64_t seed, int count) {
  std::vector<Batch> batches;
  auto gen = at::detail::createCPUGenerator(seed);
  const auto options = at::TensorOptions().dtype(at::kLong);
  for (int i = 0; i < count; ++i) {
    Batch b;
    b.input_ids = at::randint(1, config.vocab_size, {B, L}, gen, options);
    b.token_type_ids = at::zeros({B, L}, options);
    b.attention_mask = at::ones({B, L}, options);
    b.labels = at::randint(0, 2, {B}, gen, options);
    b.num_real_tokens = b.num_total_tokens = B * L;
    batches.push_back(b);
  }
  return batches;
}

std::vector<double> frozen_sums(const TaskModel& model) {
  std::vector<double> sums;
  for (const auto& [name, tensor] : model.frozen_state_dict()) sums.push_back(tensor.sum(at::kDouble).item<double>());
  return sums;
}

// The checks before timing (the header's), or an Error saying what failed.
void check_after_warmup(const TaskModel& model, bool lora, const StepResult& last, const std::vector<double>& sums_before,
                        int64_t trained, const MemoryEstimate& estimate) {
  if (!std::isfinite(last.loss) || !std::isfinite(last.grad_norm))
    throw Error(str_format("after warm-up the loss (%g) or gradient norm (%g) is not finite", last.loss, last.grad_norm));
  if (estimate.num_parameters != trained)
    throw Error(str_format("the strategy trains %lld parameters, the memory estimate counts %lld",
                           static_cast<long long>(trained), static_cast<long long>(estimate.num_parameters)));
  if (!lora) return;
  if (frozen_sums(model) != sums_before) throw Error("LoRA: a frozen base tensor changed during the warm-up steps");
  for (const auto& [name, tensor] : model.state_dict())
    if (name.find(".lora_B.") != std::string::npos && tensor.abs().max().item<double>() == 0)
      throw Error("LoRA: " + name + " is still zero after the warm-up steps");
}

// One mode, in this (child) process: the World, the job's path, the measurements.
ModeResult run_mode(const std::string& model_name, int64_t batch_size, bool lora, const Options& o) {
  int argc = 1;
  char name[] = "bench_lora";
  char* args[] = {name, nullptr};
  char** argv = args;
  World world(&argc, &argv);
  at::set_num_threads(world.num_threads());
  ModeResult r;
  r.threads = at::get_num_threads();
  r.baseline_rss = lora_status_bytes("VmRSS");
  const EncoderConfig config = lora_model_config(model_name);
  auto model = std::make_shared<TaskModel>(config);
  model->init_weights(static_cast<uint64_t>(o.seed));
  if (lora) {
    attach_lora(*model, lora_config(o), static_cast<uint64_t>(o.seed));
    model->frozen_to(at::kFloat);
  }
  model->train();
  at::manual_seed(static_cast<uint64_t>(o.seed) * 1000003u + 500009u);
  MpiCommunicator comm(world.comm());
  ParallelConfig parallel;
  const Topology topology = Topology::detect(world.comm(), parallel);
  const std::unique_ptr<Strategy> strategy =
      make_strategy(parallel, topology, *model, comm, AdamWOptions{}, mixed_precision_for(Precision::kNo, parallel));
  strategy->broadcast_parameters(0);
  for (const auto& [n, t] : model->state_dict()) r.trained += t.numel();
  for (const auto& [n, t] : model->frozen_state_dict()) r.frozen += t.numel();

  RunConfig run;
  run.train.batch_size = batch_size;
  run.data.max_length = o.seq_len;
  run.run.device = Device::kCpu;
  if (lora) run.lora = lora_config(o);
  const MemoryEstimate estimate = estimate_memory(run, config, 1);
  r.estimate_bytes = estimate.total_bytes();

  const int num_batches = std::min(o.warmup + o.steps, 4);
  const std::vector<Batch> batches = lora_batches(config, batch_size, o.seq_len, static_cast<uint64_t>(o.seed), num_batches);
  const std::vector<double> sums_before = lora ? frozen_sums(*model) : std::vector<double>();
  StepOptions step_options;
  step_options.lr = 1e-4;
  step_options.max_grad_norm = 1.0;
  Clock::time_point at[4];
  step_options.at_point = [&](StepPoint point) { at[static_cast<int>(point)] = Clock::now(); };
  StepResult last;
  for (int i = 0; i < o.warmup; ++i) last = train_step(*strategy, *model, {batches[static_cast<size_t>(i % num_batches)]}, step_options);
  check_after_warmup(*model, lora, last, sums_before, r.trained, estimate);

  std::vector<double> step_s, fwd_bwd_s, optim_s, cpu_s;
  for (int i = 0; i < o.steps; ++i) {
    const double cpu_start = lora_cpu_seconds();
    const auto start = Clock::now();
    last = train_step(*strategy, *model, {batches[static_cast<size_t>((o.warmup + i) % num_batches)]}, step_options);
    step_s.push_back(seconds_since(start));
    cpu_s.push_back(lora_cpu_seconds() - cpu_start);
    fwd_bwd_s.push_back(std::chrono::duration<double>(at[1] - start).count());
    optim_s.push_back(std::chrono::duration<double>(at[3] - at[2]).count());
  }
  const Summary step = summarize(step_s);
  r.step_min = step.min;
  r.step_median = step.median;
  r.step_max = step.max;
  r.fwd_bwd_median = summarize(fwd_bwd_s).median;
  r.optim_median = summarize(optim_s).median;
  r.cpu_median = summarize(cpu_s).median;
  r.loss = last.loss;
  r.peak_bytes = lora_status_bytes("VmHWM") - r.baseline_rss;
  // One more step for its own peak, with what building the model freed handed back.
  malloc_trim(0);
  lora_reset_peak();
  train_step(*strategy, *model, {batches[0]}, step_options);
  r.step_peak_bytes = lora_status_bytes("VmHWM") - r.baseline_rss;
  int64_t frozen_bytes = 0;
  for (const auto& [n, t] : model->frozen_state_dict()) frozen_bytes += t.numel() * t.element_size();
  r.states_bytes = static_cast<double>(strategy->memory().total() + frozen_bytes);

  // The checkpoint: what the trainer's CheckpointManager writes of the state.
  TrainState state;
  state.step = o.warmup + o.steps;
  if (lora) state.lora_json = model->lora()->to_json().dump();
  const std::string path = o.checkpoint_dir + "/bench_lora_" + std::to_string(getpid()) + ".h5";
  const auto write_start = Clock::now();
  write_train_checkpoint(path, flat_tensors(strategy->layout()), strategy->checkpoint_parts(), state, world.comm());
  r.checkpoint_write_s = seconds_since(write_start);
  r.checkpoint_bytes = static_cast<double>(std::filesystem::file_size(path));
  std::filesystem::remove(path);
  r.checkpoint_state_bytes = 12.0 * static_cast<double>(r.trained);
  if (r.checkpoint_bytes < r.checkpoint_state_bytes)
    throw Error(str_format("the checkpoint has %.0f bytes, less than its flat state's %.0f", r.checkpoint_bytes,
                           r.checkpoint_state_bytes));
  r.ok = 1;
  return r;
}

// run_mode() in a fresh child; the result comes back through a pipe.
ModeResult run_mode_in_child(const std::string& model_name, int64_t batch_size, bool lora, const Options& o) {
  int fds[2];
  if (pipe(fds) != 0) throw Error("pipe failed");
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) throw Error("fork failed");
  if (pid == 0) {
    close(fds[0]);
    int status = 1;
    try {
      const ModeResult r = run_mode(model_name, batch_size, lora, o);  // World ends (MPI_Finalize) inside
      status = write(fds[1], &r, sizeof r) == sizeof r ? 0 : 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_lora: %s %s: %s\n", model_name.c_str(), lora ? "lora" : "full", e.what());
    }
    std::fflush(stdout);
    _exit(status);
  }
  close(fds[1]);
  ModeResult r;
  const bool got = read(fds[0], &r, sizeof r) == sizeof r;
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!got || !r.ok || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw Error("the child measuring " + model_name + (lora ? " LoRA" : " full fine-tuning") + " failed");
  return r;
}

nlohmann::json mode_json(const ModeResult& r) {
  return {{"trained_parameters", r.trained},
          {"frozen_parameters", r.frozen},
          {"threads", r.threads},
          {"step_s", {{"min", r.step_min}, {"median", r.step_median}, {"max", r.step_max}}},
          {"fwd_bwd_median_s", r.fwd_bwd_median},
          {"optim_median_s", r.optim_median},
          {"cpu_per_step_median_s", r.cpu_median},
          {"last_loss", r.loss},
          {"peak_rss_over_start_bytes", r.peak_bytes},
          {"step_peak_rss_over_start_bytes", r.step_peak_bytes},
          {"strategy_and_frozen_bytes", r.states_bytes},
          {"estimate_total_bytes", r.estimate_bytes},
          {"checkpoint_bytes", r.checkpoint_bytes},
          {"checkpoint_flat_state_bytes", r.checkpoint_state_bytes},
          {"checkpoint_write_s", r.checkpoint_write_s}};
}

void print_row(const std::string& model, const char* mode, const ModeResult& r) {
  std::printf("%-10s %-5s %12lld %12lld %9.0f %9.0f %9.0f %9.0f %9.0f %9.0f %9.1f %9.1f %9.1f %9.1f %12.1f %7.2f\n",
              model.c_str(), mode, static_cast<long long>(r.trained), static_cast<long long>(r.frozen), r.step_min * 1e3,
              r.step_median * 1e3, r.step_max * 1e3, r.fwd_bwd_median * 1e3, r.optim_median * 1e3, r.cpu_median * 1e3,
              r.peak_bytes / 1e6,
              r.step_peak_bytes / 1e6, r.states_bytes / 1e6, r.estimate_bytes / 1e6, r.checkpoint_bytes / 1e6,
              r.checkpoint_write_s);
}

int run(int argc, char** argv) {
  CLI::App app{"LoRA against full fine-tuning: step time, peak memory, checkpoint size (one process per mode)"};
  Options o;
  std::string models = "bert-base:8,large:4", targets = "query,value", json_path;
  app.add_option("--models", models, "name[:batch] items: bert-base, large (hidden 1024, 24 layers), or a config.json");
  app.add_option("--seq-len", o.seq_len)->check(CLI::Range(int64_t{8}, int64_t{512}));
  app.add_option("--warmup", o.warmup, "untimed steps before the check")->check(CLI::Range(1, 1000));
  app.add_option("--steps", o.steps, "timed steps")->check(CLI::Range(1, 1000));
  app.add_option("--lora-r", o.lora_r)->check(CLI::Range(int64_t{1}, int64_t{4096}));
  app.add_option("--lora-targets", targets, "lora.target_modules, comma-separated");
  app.add_option("--checkpoint-dir", o.checkpoint_dir, "where the checkpoints are written (and removed)");
  app.add_option("--seed", o.seed);
  app.add_option("--json", json_path, "write the results here");
  CLI11_PARSE(app, argc, argv);
  if (std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_RANK"))
    throw Error("run bench_lora without mpirun: each mode runs in a one-rank MPI job of its own (a child process)");
  o.lora_targets.clear();
  std::stringstream items(targets);
  for (std::string t; std::getline(items, t, ',');) o.lora_targets.push_back(t);

  std::vector<std::pair<std::string, int64_t>> runs;
  std::stringstream list(models);
  for (std::string item; std::getline(list, item, ',');) {
    const size_t colon = item.find(':');
    runs.emplace_back(item.substr(0, colon), colon == std::string::npos ? 8 : std::stoll(item.substr(colon + 1)));
  }
  const std::string cpu = current_cpu_features().describe();
  std::printf("# bench_lora: LoRA r %lld on %s (classifier trained) against full fine-tuning; ddp, 1 rank, fp32, "
              "seq_len %lld, %d warm-up + %d timed steps, each (model, mode) in a fresh process\n",
              static_cast<long long>(o.lora_r), targets.c_str(), static_cast<long long>(o.seq_len), o.warmup, o.steps);
  std::printf("# CPU features (cpuid): %s\n", cpu.c_str());
  std::printf("# ms per step (cpu_med: the process's CPU time per step); MB = 1e6 bytes: hwm = VmHWM over the resident size before the model was built (building "
              "included), step_pk = the same for one step after malloc_trim, states = StrategyMemory + frozen base, "
              "est = estimate_memory's total; ckpt = write_train_checkpoint's file\n");
  std::printf("%-10s %-5s %12s %12s %9s %9s %9s %9s %9s %9s %9s %9s %9s %9s %12s %7s\n", "model", "mode", "trained",
              "frozen", "step_min", "step_med", "step_max", "fwd_bwd", "optim", "cpu_med", "hwm_MB", "step_pk", "states",
              "est_MB", "ckpt_MB", "ckpt_s");
  std::fflush(stdout);
  nlohmann::json results = nlohmann::json::array();
  for (const auto& [model, batch] : runs) {
    const ModeResult full = run_mode_in_child(model, batch, false, o);
    print_row(model, "full", full);
    std::fflush(stdout);
    const ModeResult lora = run_mode_in_child(model, batch, true, o);
    print_row(model, "lora", lora);
    std::printf("%-10s lora/full: step %.3f (CPU time %.3f), hwm %.3f, step peak %.3f, states %.3f, checkpoint %.5f (batch %lld x %lld, "
                "%d threads; CPU features: %s)\n",
                model.c_str(), lora.step_median / full.step_median, lora.cpu_median / full.cpu_median,
                lora.peak_bytes / full.peak_bytes,
                lora.step_peak_bytes / full.step_peak_bytes, lora.states_bytes / full.states_bytes,
                lora.checkpoint_bytes / full.checkpoint_bytes, static_cast<long long>(batch),
                static_cast<long long>(o.seq_len), full.threads, cpu.c_str());
    std::fflush(stdout);
    results.push_back({{"model", model},
                       {"batch_size", batch},
                       {"seq_len", o.seq_len},
                       {"cpu_features", cpu},
                       {"full", mode_json(full)},
                       {"lora", mode_json(lora)},
                       {"lora_over_full",
                        {{"step", lora.step_median / full.step_median},
                         {"cpu_per_step", lora.cpu_median / full.cpu_median},
                         {"peak_memory", lora.peak_bytes / full.peak_bytes},
                         {"step_peak_memory", lora.step_peak_bytes / full.step_peak_bytes},
                         {"states", lora.states_bytes / full.states_bytes},
                         {"checkpoint", lora.checkpoint_bytes / full.checkpoint_bytes}}}});
  }
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    if (!out) throw Error("--json: cannot write " + json_path);
    out << nlohmann::json{{"benchmark", "bench_lora"},
                          {"lora_r", o.lora_r},
                          {"lora_targets", o.lora_targets},
                          {"warmup", o.warmup},
                          {"steps", o.steps},
                          {"results", results}}
                   .dump(2)
        << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_lora: %s\n", e.what());
    return 2;
  }
}

}  // namespace bench_lora

SHARDTRAIN_BENCH_REGISTER(bench_lora)
