// The sweep's state: <sweep folder>/sweep_state.json (docs/sweeps.md,
// "Preemption and resume"). Every change is a read-modify-write under the
// state lock, written atomically (a temporary file renamed over the old), so a
// job killed at any moment leaves the state before or after a change, never
// half of one; a re-run reads it and goes on.
//
//   SweepStateLock lock(dir, timeout_s);        // link(2)-based, like train/run_lock.h
//   SweepState state = read_sweep_state(dir);
//   ... change it ...
//   write_sweep_state(dir, state);
//
// It holds the trials (their parameters, status, reports, checkpoints, errors)
// and the ordered log of every evaluation reported with the scheduler's
// decision: ASHA's rungs are rebuilt by replaying that log in order.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shardtrain/sweep/space.h"

namespace shardtrain {

// pending: not started, or interrupted (it resumes from its newest checkpoint);
// running: a group trains it now; finished: ran to its end (or train's own
// early stopping, or max_t); pruned: the scheduler stopped it; failed: its
// `train` threw an error (recorded).
enum class TrialStatus { kPending, kRunning, kFinished, kPruned, kFailed };
const char* trial_status_name(TrialStatus status);

// One evaluation of one trial, in the order the sweep recorded them.
struct SweepEvent {
  std::string trial;
  int64_t evaluation = 0;  // 1, 2, ... within the trial
  int64_t step = 0;        // the trial's optimizer step
  double value = 0;        // sweep.metric
  bool stop = false;       // the scheduler's decision
  bool pruned = false;     // stopped below a rung's cutoff (AshaDecision::pruned)
  std::string reason;
};

struct TrialRecord {
  TrialSpec spec;
  TrialStatus status = TrialStatus::kPending;
  int64_t group = -1;          // the group that ran it last
  int64_t attempts = 0;        // times a group started it
  int64_t steps = 0;           // optimizer steps at its end
  std::string stop_reason;     // pruned / stopped early / max_t: why
  std::string error;           // failed: the error
  // Paths relative to the sweep folder, so that a moved folder still holds
  // true ones ("trial_003/checkpoint_000002.h5", "trial_003"); a state
  // written with absolute paths is read into these.
  std::string best_checkpoint; // by checkpoint.score_attribute, else the newest
  std::string run_dir;
  // Not stored: what of a finished or pruned trial's files is gone (its run
  // folder or checkpoint; check_trial_files), "" when all are there.
  std::string missing;
};

struct SweepState {
  std::string fingerprint;     // what the trials were made from: a changed sweep file is refused
  // The base config's resolved values (key -> TOML text), but for the keys the
  // sweep sets (run.name, run.storage_path, the space's): a changed base is
  // refused, naming the keys. Empty in a state written before it was kept.
  std::map<std::string, std::string> base_config;
  std::string metric;          // sweep.metric, sweep.mode and ASHA's rungs (empty: scheduler "none"),
  bool maximize = true;        // for --status, which reads the state alone
  std::vector<int64_t> rungs;
  bool stop_requested = false; // a group stopped for SIGTERM / SIGUSR1: take no new trials
  std::vector<TrialRecord> trials;
  std::vector<SweepEvent> events;

  TrialRecord& trial(const std::string& id);
  // The trial's evaluations, in order.
  std::vector<const SweepEvent*> events_of(const std::string& id) const;
};

std::string sweep_state_path(const std::string& sweep_dir);
bool sweep_state_exists(const std::string& sweep_dir);
// Throws Error naming the file when it is missing or damaged.
SweepState read_sweep_state(const std::string& sweep_dir);
// Atomically; doubles are written so that they read back bit for bit.
void write_sweep_state(const std::string& sweep_dir, const SweepState& state);

// <sweep_dir>/<path> for a path the state holds (relative to the sweep
// folder; an absolute one as it is).
std::string sweep_path(const std::string& sweep_dir, const std::string& path);
// Sets TrialRecord::missing for each finished or pruned trial whose run
// folder or checkpoint is not in `sweep_dir` any more ("" for the others).
// Returns how many are missing.
int64_t check_trial_files(const std::string& sweep_dir, SweepState& state);

// The keys whose values differ between a recorded base config and the
// current one, as "data.max_length: 64 -> 32" (a key only one holds shows
// "(none)" on the other side), sorted by key.
std::vector<std::string> base_config_changes(const std::map<std::string, std::string>& recorded,
                                             const std::map<std::string, std::string>& current);

// The text fingerprint of a sweep's trials and scheduler: two sweep files that
// make the same trials with the same metric and scheduler have the same one.
std::string sweep_fingerprint(const SweepSpec& spec, const std::vector<TrialSpec>& trials);

// A short-held lock around a read-modify-write of the state, between the
// groups of one job: <dir>/sweep_state.lock, taken by link(2) (atomic on
// local file systems, NFS and Lustre), retried every few milliseconds;
// Error after `timeout_s`, naming the lock file. Released by the destructor.
// A lock left by a killed job is removed by the next job's rank 0, which holds
// the sweep folder's RunLock (remove_stale_sweep_state_lock).
class SweepStateLock {
 public:
  SweepStateLock(const std::string& sweep_dir, double timeout_s);
  ~SweepStateLock();
  SweepStateLock(const SweepStateLock&) = delete;
  SweepStateLock& operator=(const SweepStateLock&) = delete;

 private:
  std::string path_;
};
// Returns true when there was one.
bool remove_stale_sweep_state_lock(const std::string& sweep_dir);

}  // namespace shardtrain
