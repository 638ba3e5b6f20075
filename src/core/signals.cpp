#include "shardtrain/core/signals.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace shardtrain {
namespace {

// Lock-free atomics are async-signal-safe; a lock-based one would not be.
static_assert(std::atomic<int64_t>::is_always_lock_free, "the SIGTERM handler needs lock-free 64-bit atomics");
static_assert(std::atomic<int>::is_always_lock_free, "the SIGTERM handler needs lock-free atomics");

std::atomic<int> g_signals_seen{0};           // SIGTERMs since install / reset
std::atomic<int64_t> g_first_signal_ns{0};    // CLOCK_MONOTONIC of the first one
std::atomic<int64_t> g_grace_ms{0};           // 0 = not installed
constexpr int64_t kSameRequestNs = 2000000000;  // 2 s

int64_t monotonic_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);  // async-signal-safe (POSIX)
  return static_cast<int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
}

// write(2) of a constant line: the only output a handler may make.
void write_line(const char* text) {
  ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

void on_sigterm(int) {
  // The time first, so that whoever sees the count sees the time too.
  const int64_t now = monotonic_ns();
  int64_t first = 0;
  g_first_signal_ns.compare_exchange_strong(first, now);  // first: the earlier time, or 0
  // One request often arrives twice within moments (scancel signals srun and
  // its tasks, and srun forwards its own): a repeat within
  // kSameRequestNs is the same request, not a second one.
  if (first != 0 && now - first < kSameRequestNs) return;
  if (g_signals_seen.fetch_add(1) > 0) {
    write_line("shardtrain: a second SIGTERM: exiting at once (the newest complete checkpoint is kept)\n");
    _exit(kPreemptedExitStatus);
  }
  const int64_t grace_ms = g_grace_ms.load();
  alarm(static_cast<unsigned>((grace_ms + 999) / 1000));  // whole seconds, rounded up
}

void on_sigalrm(int) {
  if (g_signals_seen.load() == 0) return;  // not ours to act on
  write_line("shardtrain: checkpoint.preemption_grace_s ran out after SIGTERM: exiting at once (the newest "
             "complete checkpoint is kept)\n");
  _exit(kPreemptedExitStatus);
}

void install(int signal_number, void (*handler)(int)) {
  struct sigaction action {};
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(signal_number, &action, nullptr);
}

}  // namespace

void install_preemption_handler(double grace_s) {
  if (!(grace_s > 0)) return;
  g_grace_ms.store(static_cast<int64_t>(std::ceil(grace_s * 1000.0)));
  install(SIGALRM, on_sigalrm);
  install(SIGTERM, on_sigterm);
  // SIGUSR1 is the same request: Open MPI's mpirun forwards it to the ranks
  // (a SIGTERM it gets, it answers by killing them a moment later), and Slurm
  // users ask for it with --signal=USR1@90; scripts/mpirun.sh turns a TERM
  // or INT it receives into a forwarded USR1.
  install(SIGUSR1, on_sigterm);
}

bool preemption_requested() { return g_signals_seen.load() > 0; }

double seconds_since_preemption_request() {
  const int64_t first = g_first_signal_ns.load();
  if (first == 0) return 0.0;
  return static_cast<double>(monotonic_ns() - first) * 1e-9;
}

double preemption_grace_s() { return static_cast<double>(g_grace_ms.load()) / 1000.0; }

void reset_preemption_for_tests() {
  alarm(0);
  g_signals_seen.store(0);
  g_first_signal_ns.store(0);
}

}  // namespace shardtrain
