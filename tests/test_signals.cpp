// The SIGTERM handler (core/signals.h), each case in a forked child so that
// the handler, its alarm and its _exit stay out of the test process: the flag
// and the time since the signal, a repeat within 2 s counted once, a second
// SIGTERM exiting at once with 143,
// the grace period's alarm exiting with 143, and grace 0 leaving SIGTERM's
// default action (the process dies of it).
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <thread>

#include "shardtrain/core/signals.h"

namespace {

struct SignalsChildEnd {
  bool exited = false;
  int status = -1;   // exit status when exited
  int signal = 0;    // the signal that ended it otherwise
  double seconds = 0;
};

// Runs `body` in a child that _exit()s with its return value; waits up to 20 s.
SignalsChildEnd signals_run_child(const std::function<int()>& body) {
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) _exit(body());
  SignalsChildEnd end;
  int status = 0;
  for (int i = 0; i < 2000; ++i) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      end.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      end.exited = WIFEXITED(status);
      end.status = end.exited ? WEXITSTATUS(status) : -1;
      end.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
      return end;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  FAIL("the child did not end within 20 s");
  return end;
}

}  // namespace

TEST_CASE("signals: SIGTERM sets the flag and the time, and the process carries on") {
  const SignalsChildEnd end = signals_run_child([] {
    shardtrain::install_preemption_handler(100.0);
    if (shardtrain::preemption_requested() || shardtrain::seconds_since_preemption_request() != 0.0) return 10;
    raise(SIGTERM);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const double since = shardtrain::seconds_since_preemption_request();
    if (!shardtrain::preemption_requested()) return 11;
    if (since < 0.15 || since > 5.0) return 12;
    shardtrain::reset_preemption_for_tests();
    if (shardtrain::preemption_requested()) return 13;
    return 0;
  });
  CHECK(end.exited);
  CHECK(end.status == 0);
}

TEST_CASE("signals: SIGUSR1 is the same request as SIGTERM (what mpirun forwards); a TERM right after it is a repeat") {
  const SignalsChildEnd end = signals_run_child([] {
    shardtrain::install_preemption_handler(100.0);
    raise(SIGUSR1);
    if (!shardtrain::preemption_requested()) return 11;
    raise(SIGTERM);  // within 2 s: the same request, not a second one (which would _exit 143)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return shardtrain::preemption_requested() ? 0 : 12;
  });
  CHECK(end.exited);
  CHECK(end.status == 0);
}

TEST_CASE("signals: a repeat within 2 s is the same request; a later SIGTERM exits at once with 143") {
  const SignalsChildEnd same = signals_run_child([] {
    shardtrain::install_preemption_handler(100.0);
    raise(SIGTERM);
    raise(SIGTERM);  // srun and slurmstepd both deliver it
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    return shardtrain::preemption_requested() ? 0 : 1;
  });
  CHECK(same.exited);
  CHECK(same.status == 0);
  const SignalsChildEnd second = signals_run_child([] {
    shardtrain::install_preemption_handler(100.0);
    raise(SIGTERM);
    std::this_thread::sleep_for(std::chrono::milliseconds(2200));
    raise(SIGTERM);
    std::this_thread::sleep_for(std::chrono::seconds(10));
    return 0;
  });
  CHECK(second.exited);
  CHECK(second.status == shardtrain::kPreemptedExitStatus);
  CHECK(second.seconds < 6.0);
}

TEST_CASE("signals: the grace period's alarm exits with 143 when the job has not ended") {
  const SignalsChildEnd end = signals_run_child([] {
    shardtrain::install_preemption_handler(1.0);
    raise(SIGTERM);
    for (int i = 0; i < 100; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));  // 10 s
    return 0;
  });
  CHECK(end.exited);
  CHECK(end.status == shardtrain::kPreemptedExitStatus);
  CHECK(end.seconds >= 0.9);
  CHECK(end.seconds < 6.0);
}

TEST_CASE("signals: grace 0 installs nothing, SIGTERM ends the process") {
  const SignalsChildEnd end = signals_run_child([] {
    signal(SIGTERM, SIG_DFL);  // the child inherits doctest's crash handler
    shardtrain::install_preemption_handler(0.0);
    raise(SIGTERM);
    std::this_thread::sleep_for(std::chrono::seconds(10));
    return 0;
  });
  CHECK_FALSE(end.exited);
  CHECK(end.signal == SIGTERM);
}
