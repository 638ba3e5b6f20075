// Activation memory of one training forward, with and without
// model.gradient_checkpointing (docs/DESIGN.md, "Activation checkpointing"),
// and what the recomputation costs in time. One process, no MPI ranks, the
// CPU; bert-base-cased's shape (random weights), a [B, L] batch of real
// tokens (no padding), train mode with dropout 0.1.
//
// Activation memory = the process's anonymous resident memory (RssAnon: no
// mapped library code) after a training forward (the autograd graph holding
// what backward needs) minus before it, measured on the second step, after
// one untimed forward + backward has paid the one-time costs (BLAS and
// OpenMP thread buffers, AdamW-free gradients allocated).
// glibc's malloc is told to map every allocation of 64 KiB or more on its own
// and to unmap it when freed (a fixed M_MMAP_THRESHOLD stops its dynamic
// threshold from moving big blocks into the retained heap), so resident memory
// follows the live tensors. Each mode runs in its own fresh child process
// (fork) so one mode's freed memory never counts in the other's. The peak
// during forward + backward (VmHWM, reset through /proc/self/clear_refs) is
// reported too: it adds the gradients and backward's temporaries.
//
// Time: forward + backward, median of --reps after the measured step, in
// the same child; the two children run one after the other.
//
// --unpadded runs the packed forward (model.unpadded, training's default)
// instead of padded rows; every row is full length, so both hold the same
// tokens. Beside each measurement: the memory estimate's figure
// (train/memory_estimate.h) for the same forward.
//
//   bench_activation_memory [--batch-size 32] [--seq-len 128] [--unpadded] [--threads T] [--reps 3] [--json FILE]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "shardtrain/core/check.h"
#include "shardtrain/data/collator.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/train/memory_estimate.h"
#include "bench_util.h"

namespace bench_activation_memory {  // every benchmark's code lives in its own namespace: they compile together (benchmarks/CMakeLists.txt)

using namespace shardtrain;

namespace {

using Clock = std::chrono::steady_clock;

// A /proc/self/status field in bytes ("VmRSS", "VmHWM").
double status_bytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.compare(0, field.size() + 1, field + ":") == 0) return std::stod(line.substr(field.size() + 1)) * 1024.0;
  throw Error("/proc/self/status has no " + field);
}

void reset_peak() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";  // resets VmHWM to the current resident size (Linux >= 4.0)
  clear.flush();
  if (!clear) throw Error("cannot write /proc/self/clear_refs (needed to reset the peak, VmHWM)");
}

Batch full_batch(int64_t B, int64_t L) {
  Batch b;
  auto gen = at::detail::createCPUGenerator(7);
  b.input_ids = at::randint(1000, 28000, {B, L}, gen, at::kLong);
  b.token_type_ids = at::zeros({B, L}, at::kLong);
  b.attention_mask = at::ones({B, L}, at::kLong);
  b.labels = at::randint(0, 2, {B}, gen, at::kLong);
  b.num_real_tokens = b.num_total_tokens = B * L;
  return b;
}

struct Measured {
  double activation_bytes = 0, peak_over_start_bytes = 0, fwd_bwd_s = 0;
};

Measured measure(bool checkpointing, int64_t B, int64_t L, bool unpadded, int reps) {
  TaskModel model(bert_base_cased_config(2));
  model.init_weights(1);
  model.set_gradient_checkpointing(checkpointing);
  model.set_unpadded(unpadded);
  model.train();
  const Batch batch = full_batch(B, L);
  for (auto& p : model.parameters()) p.mutable_grad() = at::zeros_like(p);  // gradients exist, as in training
  model.loss(model.forward_batch(batch), batch.labels).backward();  // one-time costs, untimed
  Measured m;
  {
    const double before = status_bytes("RssAnon"), before_rss = status_bytes("VmRSS");
    reset_peak();
    at::Tensor loss = model.loss(model.forward_batch(batch), batch.labels);
    m.activation_bytes = status_bytes("RssAnon") - before;
    loss.backward();
    m.peak_over_start_bytes = status_bytes("VmHWM") - before_rss;
  }
  std::vector<double> times;
  for (int r = 0; r <= reps; ++r) {
    const auto start = Clock::now();
    model.loss(model.forward_batch(batch), batch.labels).backward();
    if (r > 0) times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  m.fwd_bwd_s = times[times.size() / 2];
  return m;
}

// measure() in a fresh child; the result comes back through a pipe.
Measured measure_in_child(bool checkpointing, int64_t B, int64_t L, bool unpadded, int reps) {
  int fds[2];
  if (pipe(fds) != 0) throw Error("pipe failed");
  const pid_t pid = fork();
  if (pid < 0) throw Error("fork failed");
  if (pid == 0) {
    close(fds[0]);
    int status = 0;
    try {
      const Measured m = measure(checkpointing, B, L, unpadded, reps);
      status = write(fds[1], &m, sizeof m) == sizeof m ? 0 : 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_activation_memory: %s\n", e.what());
      status = 1;
    }
    _exit(status);
  }
  close(fds[1]);
  Measured m;
  const bool got = read(fds[0], &m, sizeof m) == sizeof m;
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!got || !WIFEXITED(status) || WEXITSTATUS(status) != 0) throw Error("the measuring child failed");
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"activation memory with and without gradient checkpointing (bert-base shape, CPU)"};
  int64_t batch_size = 32, seq_len = 128;
  int threads = 0, reps = 3;
  bool unpadded = false;
  std::string json_path;
  app.add_option("--batch-size", batch_size)->check(CLI::PositiveNumber);
  app.add_option("--seq-len", seq_len)->check(CLI::Range(int64_t{2}, int64_t{512}));
  app.add_flag("--unpadded", unpadded, "the packed forward (model.unpadded) instead of padded rows");
  app.add_option("--threads", threads, "intra-op threads (0: LibTorch's default)");
  app.add_option("--reps", reps)->check(CLI::PositiveNumber);
  app.add_option("--json", json_path);
  CLI11_PARSE(app, argc, argv);
  if (threads > 0) at::set_num_threads(threads);
  mallopt(M_MMAP_THRESHOLD, 64 * 1024);  // see the top of this file
  mallopt(M_TRIM_THRESHOLD, 0);
  try {
    const Measured plain = measure_in_child(false, batch_size, seq_len, unpadded, reps);
    const Measured ckpt = measure_in_child(true, batch_size, seq_len, unpadded, reps);
    std::printf("# bench_activation_memory: bert-base shape, batch %lld x %lld tokens, %s, dropout 0.1, %d threads\n",
                static_cast<long long>(batch_size), static_cast<long long>(seq_len),
                unpadded ? "packed (model.unpadded)" : "padded", at::get_num_threads());
    std::printf("%-22s %18s %14s %22s %16s %14s\n", "mode", "activations_MB", "estimated_MB", "peak_fwd_bwd_over_MB",
                "est_peak_MB", "fwd_bwd_ms");
    auto row = [&](const char* name, const Measured& m, bool checkpointing) {
      const ActivationEstimate e = estimate_activations(bert_base_cased_config(2), batch_size, seq_len, 4, checkpointing,
                                                        /*device_is_cpu=*/true, unpadded);
      std::printf("%-22s %18.1f %14.1f %22.1f %16.1f %14.1f\n", name, m.activation_bytes / 1e6, e.kept_bytes / 1e6,
                  m.peak_over_start_bytes / 1e6, e.peak_bytes / 1e6, m.fwd_bwd_s * 1e3);
    };
    row("plain", plain, false);
    row("gradient_checkpointing", ckpt, true);
    std::printf("# checkpointed / plain: activations %.3f, peak %.3f, time %.3f\n",
                ckpt.activation_bytes / plain.activation_bytes, ckpt.peak_over_start_bytes / plain.peak_over_start_bytes,
                ckpt.fwd_bwd_s / plain.fwd_bwd_s);
    if (!json_path.empty()) {
      auto to_json = [](const Measured& m) {
        return nlohmann::json{{"activation_bytes", m.activation_bytes},
                              {"peak_fwd_bwd_over_start_bytes", m.peak_over_start_bytes},
                              {"fwd_bwd_s", m.fwd_bwd_s}};
      };
      std::ofstream(json_path) << nlohmann::json{{"batch_size", batch_size},
                                                 {"seq_len", seq_len},
                                                 {"unpadded", unpadded},
                                                 {"threads", at::get_num_threads()},
                                                 {"plain", to_json(plain)},
                                                 {"gradient_checkpointing", to_json(ckpt)}}
                                      .dump(2)
                               << "\n";
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_activation_memory: %s\n", e.what());
    return 2;
  }
  return 0;
}

}  // namespace bench_activation_memory

SHARDTRAIN_BENCH_REGISTER(bench_activation_memory)
