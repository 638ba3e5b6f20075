// RunLock: at most one job per run folder.
//
//   RunLock lock(run_dir);   // rank 0 only, before anything is written there
//   ...                      // the whole run
//                            // released when `lock` is destroyed
//
// Two jobs in one run folder would write every report twice and overwrite each
// other's checkpoints, so a second job is refused with an Error naming the
// holder:
//   run folder runs/q is in use by another job: host node07, pid 4242 (since
//   2024-05-01 10:00:00 UTC, lock file runs/q/.shardtrain.lock); ...
//
// The lock is the file "<run_dir>/.shardtrain.lock", one line naming its
// holder (host, boot id, pid namespace, pid, process start time, job id). It
// is taken by writing that line to a file of this process's own and link(2)ing
// it to the lock's name, which succeeds for exactly one contender on local
// file systems, NFS and Lustre alike (flock is not reliable on all of them),
// and the lock is never seen half written.
//
// Staleness: a job killed with SIGKILL, or on a node that died, cannot release
// its lock. A lock is stale when
//   - its holder ran on this machine (same host name, boot id and pid
//     namespace) and that process is gone (or the pid now belongs to a
//     process that started later), or
//   - it belongs to an earlier run of this very Slurm job (same SLURM_JOB_ID,
//     lower SLURM_RESTART_COUNT): Slurm requeued the job, so that run is over,
//     wherever it ran, or
//   - its heartbeat is older than stale_after_s: the holder touches the lock
//     file every heartbeat_s, and the age is measured against the file
//     system's own clock (the time stamp of a file just written next to it),
//     so clock differences between nodes do not matter.
// A stale lock is taken over: renamed aside (only one contender's rename can
// succeed, and a contender checks that what it renamed is the lock it judged
// stale), then taken as above; the caller can log took_over().
#pragma once

#include <memory>
#include <string>

namespace shardtrain {

struct RunLockOptions {
  double heartbeat_s = 30;      // how often the holder touches the lock
  double stale_after_s = 300;   // a lock untouched this long belongs to a dead job
  std::string job_id;           // for messages; "" = SLURM_JOB_ID when set
};

class RunLock {
 public:
  // Takes the lock of `run_dir` (which must exist) or throws Error naming the
  // live holder, or the reason the lock file cannot be written.
  explicit RunLock(const std::string& run_dir, const RunLockOptions& options = {});
  ~RunLock();  // releases the lock if it is still this process's
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  const std::string& path() const;
  // The holder line of a stale lock this one replaced ("" when none), e.g.
  // "host node07, pid 4242 (since ...): the process is gone".
  const std::string& took_over() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// "<run_dir>/.shardtrain.lock".
std::string run_lock_path(const std::string& run_dir);

}  // namespace shardtrain
