// The run-folder lock (train/run_lock.h) between two processes: this test and
// tests/run_lock_probe.cpp. A second job is refused naming the holder's host
// and pid; a lock left by a dead process on this machine, or by another host
// whose heartbeat stopped, is taken over; of several contenders for a stale
// lock exactly one wins; the holder's heartbeat keeps the lock fresh.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "shardtrain/core/check.h"
#include "shardtrain/train/run_lock.h"

#include "support/mpi_ranks.h"

using namespace shardtrain;

namespace {

struct LockProbeResult {
  int status = -1;
  std::string output;
};

// Runs tests/run_lock_probe with `arguments` and waits for it.
LockProbeResult run_lock_probe(const std::string& arguments) {
  const std::string command = std::string(SHARDTRAIN_BINARY_DIR) + "/tests/run_lock_probe " + arguments + " 2>&1";
  LockProbeResult result;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
  const int status = pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

std::string lock_test_dir() {
  char buffer[] = "/tmp/shardtrain_run_lock_XXXXXX";
  REQUIRE(mkdtemp(buffer) != nullptr);
  return buffer;
}

std::string lock_test_host() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return host;
}

bool lock_contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

void set_mtime_ago(const std::string& path, double seconds) {
  struct timespec times[2];
  clock_gettime(CLOCK_REALTIME, &times[0]);
  times[0].tv_sec -= static_cast<time_t>(seconds);
  times[1] = times[0];
  REQUIRE(utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
}

}  // namespace

TEST_CASE("a second job on a run folder is refused, naming the holder's host and pid") {
  const std::string dir = lock_test_dir();
  {
    RunLock lock(dir);
    CHECK(std::filesystem::exists(run_lock_path(dir)));
    CHECK(lock.took_over().empty());
    const LockProbeResult second = run_lock_probe("try " + dir);
    CHECK(second.status == 2);
    CHECK(lock_contains(second.output, "refused: run folder " + dir + " is in use by another job: host " +
                                           lock_test_host() + ", pid " + std::to_string(getpid()) + " (since "));
    CHECK(lock_contains(second.output, "lock file " + run_lock_path(dir)));
    // No leftovers of the refused attempt.
    for (const auto& entry : std::filesystem::directory_iterator(dir))
      CHECK(entry.path().filename() == ".shardtrain.lock");
    // A live holder on this machine whose heartbeat is late (a loaded node)
    // still holds the folder: only another host's lock goes stale by its age.
    set_mtime_ago(run_lock_path(dir), 60);
    const LockProbeResult late = run_lock_probe("try " + dir);
    CHECK(late.status == 2);
    CHECK(lock_contains(late.output, "refused: run folder " + dir + " is in use by another job"));
  }
  // Released at the end of the holder's life: the next job takes it.
  CHECK_FALSE(std::filesystem::exists(run_lock_path(dir)));
  const LockProbeResult next = run_lock_probe("try " + dir);
  CHECK(next.status == 0);
  CHECK(next.output == "acquired\n");
  CHECK_FALSE(std::filesystem::exists(run_lock_path(dir)));
  std::filesystem::remove_all(dir);
}

TEST_CASE("the lock of a killed job on this machine is taken over") {
  const std::string dir = lock_test_dir();
  const LockProbeResult died = run_lock_probe("die " + dir);
  REQUIRE(died.status == 0);
  REQUIRE(std::filesystem::exists(run_lock_path(dir)));  // left behind, its pid gone
  RunLock lock(dir);
  CHECK(lock_contains(lock.took_over(), "host " + lock_test_host() + ", pid "));
  CHECK(lock_contains(lock.took_over(), ": the process is gone"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("the lock of a killed job whose process is still a zombie is taken over") {
  const std::string dir = lock_test_dir();
  // The probe is this process's child, and it is not reaped until the end:
  // like a rank killed with SIGKILL in a container whose init does not reap.
  const std::string probe = std::string(SHARDTRAIN_BINARY_DIR) + "/tests/run_lock_probe";
  char* argv[] = {const_cast<char*>(probe.c_str()), const_cast<char*>("die"), const_cast<char*>(dir.c_str()), nullptr};
  pid_t child = -1;
  REQUIRE(posix_spawn(&child, probe.c_str(), nullptr, nullptr, argv, environ) == 0);
  bool zombie = false;
  // Up to 2 minutes: under ASan a LibTorch-linked process takes several
  // seconds of CPU only to start (10 s here was too short on a loaded machine).
  for (int i = 0; i < 4800 && !zombie; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    siginfo_t info {};
    zombie = waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == child;
  }
  REQUIRE(zombie);
  REQUIRE(std::filesystem::exists(run_lock_path(dir)));
  {
    RunLock lock(dir);
    CHECK(lock_contains(lock.took_over(), "pid " + std::to_string(child)));
    CHECK(lock_contains(lock.took_over(), ": the process is gone"));
  }
  int status = 0;
  waitpid(child, &status, 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("another host's lock: refused while its heartbeat is fresh, taken over once it is stale") {
  const std::string dir = lock_test_dir();
  const std::string path = run_lock_path(dir);
  std::ofstream(path) << "host=node99 boot=other pidns=pid:[1] pid=4242 start=1 job=777 since=1700000000\n";
  RunLockOptions options;
  options.stale_after_s = 60;
  const std::string message = shardtrain_test::error_of([&] { RunLock lock(dir, options); });
  CHECK(lock_contains(message, "is in use by another job: host node99, pid 4242, job 777 (since 2023-11-14 22:13:20 UTC)"));
  set_mtime_ago(path, 120);  // the other host stopped touching it two minutes ago
  RunLock lock(dir, options);
  CHECK(lock_contains(lock.took_over(), "host node99, pid 4242, job 777"));
  CHECK(lock_contains(lock.took_over(), "no heartbeat for 12"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a requeued Slurm job takes over the lock of its own earlier run at once") {
  const std::string dir = lock_test_dir();
  const std::string path = run_lock_path(dir);
  // Fresh heartbeat, another node, the same job: Slurm restarted it, so that run is over.
  std::ofstream(path) << "host=node99 boot=other pidns=pid:[1] pid=4242 start=1 job=777 restart=0 since=1700000000\n";
  setenv("SLURM_JOB_ID", "777", 1);
  setenv("SLURM_RESTART_COUNT", "1", 1);
  std::string took_over;
  {
    RunLock lock(dir);
    took_over = lock.took_over();
  }
  // Another job (or a second step of the same run of the job) is still refused.
  std::ofstream(path) << "host=node99 boot=other pidns=pid:[1] pid=4242 start=1 job=777 restart=1 since=1700000000\n";
  const std::string refused = shardtrain_test::error_of([&] { RunLock again(dir); });
  unsetenv("SLURM_JOB_ID");
  unsetenv("SLURM_RESTART_COUNT");
  CHECK(lock_contains(took_over, "job 777"));
  CHECK(lock_contains(took_over, "an earlier run of this Slurm job, which Slurm has restarted (SLURM_RESTART_COUNT 1)"));
  CHECK(lock_contains(refused, "is in use by another job: host node99, pid 4242, job 777"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("of several jobs racing for a stale lock exactly one wins, and the holder's heartbeat keeps it fresh") {
  const std::string dir = lock_test_dir();
  REQUIRE(run_lock_probe("die " + dir).status == 0);
  const std::string stale = [&] {
    std::ifstream in(run_lock_path(dir));
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  // Four contenders at once; the winner holds the lock for 8 s, longer than
  // the others take to start (loading the probe) and give up.
  std::vector<std::thread> threads;
  std::vector<LockProbeResult> results(4);
  for (size_t i = 0; i < results.size(); ++i)
    threads.emplace_back([&, i] { results[i] = run_lock_probe("try " + dir + " 8"); });
  // Once a winner holds it, its heartbeat (every 0.2 s in the probe) moves the mtime.
  bool taken = false;
  for (int i = 0; i < 2400 && !taken; ++i) {  // up to 60 s: a sanitizer build starts slowly
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    std::ifstream in(run_lock_path(dir));
    const std::string now(std::istreambuf_iterator<char>(in), {});
    taken = !now.empty() && now != stale;
  }
  CHECK(taken);
  struct stat before {}, after {};
  CHECK(stat(run_lock_path(dir).c_str(), &before) == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  CHECK(stat(run_lock_path(dir).c_str(), &after) == 0);
  CHECK((after.st_mtim.tv_sec > before.st_mtim.tv_sec ||
         (after.st_mtim.tv_sec == before.st_mtim.tv_sec && after.st_mtim.tv_nsec > before.st_mtim.tv_nsec)));
  for (auto& t : threads) t.join();
  int winners = 0, refused = 0;
  for (const auto& r : results) {
    winners += r.status == 0;
    refused += r.status == 2 && lock_contains(r.output, "is in use by another job");
  }
  CHECK(winners == 1);
  CHECK(refused == 3);
  CHECK_FALSE(std::filesystem::exists(run_lock_path(dir)));
  std::filesystem::remove_all(dir);
}
