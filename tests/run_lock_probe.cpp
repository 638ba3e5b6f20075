// A second process for tests/test_run_lock.cpp (no MPI):
//   run_lock_probe try DIR [HOLD_S]  takes DIR's run lock, prints "acquired"
//                                    (and "took over: <holder>" for a stale
//                                    one), holds it HOLD_S seconds, releases
//                                    it; prints "refused: <Error>" and exits 2
//                                    when another job holds it
//   run_lock_probe die DIR           takes the lock and exits without
//                                    releasing it, as a job killed by SIGKILL
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "shardtrain/core/check.h"
#include "shardtrain/train/run_lock.h"

int main(int argc, char** argv) {
  if (argc < 3) return 3;
  shardtrain::RunLockOptions options;
  options.heartbeat_s = 0.2;
  options.stale_after_s = 5;
  try {
    shardtrain::RunLock lock(argv[2], options);
    std::printf("acquired\n");
    if (!lock.took_over().empty()) std::printf("took over: %s\n", lock.took_over().c_str());
    std::fflush(stdout);
    if (std::strcmp(argv[1], "die") == 0) _exit(0);
    if (argc > 3) std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(argv[3])));
  } catch (const shardtrain::Error& e) {
    std::printf("refused: %s\n", e.what());
    return 2;
  }
  return 0;
}
