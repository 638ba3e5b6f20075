#include "shardtrain/sweep/runner.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>

#include "shardtrain/comm/mpi_helpers.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/signals.h"
#include "shardtrain/core/text.h"
#include "shardtrain/sweep/asha.h"
#include "shardtrain/train/run_lock.h"
#include "shardtrain/train/trainer.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;

struct CommOwner {
  MPI_Comm comm = MPI_COMM_NULL;
  ~CommOwner() {
    if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  }
};

// Log lines of a group's rank 0 (its
// trial's train.log and stderr) while it trains, its stderr lines marked
// with the trial where several groups share the terminal; the world's rank
// again afterwards.
struct LogRankScope {
  int world_rank;
  LogRankScope(int group_rank, int world_rank, const std::string& prefix) : world_rank(world_rank) {
    set_log_rank(group_rank);
    set_log_stderr_prefix(prefix);
  }
  ~LogRankScope() {
    set_log_rank(world_rank);
    set_log_stderr_prefix("");
  }
};

// ASHA's rungs rebuilt from the recorded evaluations, in their recorded order
// (sweep/asha.h); a replayed decision that differs from the recorded one (a
// hand-edited state) is reported, and the recorded one stands.
Asha replay(const SweepSpec& spec, const SweepState& state) {
  Asha asha({spec.grace_period, spec.reduction_factor, spec.max_t, spec.maximize}, spec.metric);
  for (const SweepEvent& e : state.events) {
    const AshaDecision d = asha.on_result(e.trial, e.evaluation, e.value);
    if (d.stop != e.stop)
      log_warn("sweep state: %s's evaluation %lld was recorded as '%s', ASHA's rule replayed says '%s'; the recorded "
               "decision stands", e.trial.c_str(), static_cast<long long>(e.evaluation), e.reason.c_str(),
               d.reason.c_str());
  }
  return asha;
}

// A checkpoint's path as the state keeps it: relative to the sweep folder
// (the trainer's paths are under <plan.dir>/<trial id>, spelled the same way).
std::string relative_to_sweep(const SweepPlan& plan, const std::string& path) {
  if (path.empty()) return path;
  const std::string rel = fs::path(path).lexically_relative(plan.dir).string();
  return rel.empty() || rel.rfind("..", 0) == 0 ? path : rel;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

std::string describe_change(const SweepState& recorded, const std::vector<TrialSpec>& trials) {
  if (recorded.trials.size() != trials.size())
    return str_format("it holds %zu trials, the sweep file now makes %zu", recorded.trials.size(), trials.size());
  for (size_t i = 0; i < trials.size(); ++i)
    if (recorded.trials[i].spec.id != trials[i].id || recorded.trials[i].spec.params != trials[i].params)
      return "trial " + trials[i].id + "'s parameters differ";
  return "the metric, mode or scheduler differ";
}

SweepState new_state(const SweepPlan& plan, const std::string& fingerprint) {
  SweepState state;
  state.fingerprint = fingerprint;
  state.base_config = plan.base_config;
  state.metric = plan.spec.metric;
  state.maximize = plan.spec.maximize;
  if (plan.spec.asha)
    state.rungs = Asha({plan.spec.grace_period, plan.spec.reduction_factor, plan.spec.max_t, plan.spec.maximize},
                       plan.spec.metric).rungs();
  for (const TrialSpec& t : plan.trials) {
    TrialRecord record;
    record.spec = t;
    record.run_dir = t.id;  // relative to the sweep folder
    state.trials.push_back(record);
  }
  return state;
}

// Refuses a state made from another sweep file or another base config
// (nothing changed); a state from before the base config was kept gets it.
// Returns whether the state changed.
bool check_recorded(const SweepPlan& plan, const std::string& fingerprint, SweepState& state) {
  if (state.fingerprint != fingerprint)
    throw Error(sweep_state_path(plan.dir) + " was made from another sweep file (" + describe_change(state, plan.trials) +
                "): nothing was changed. Restore the sweep file " + plan.spec.file +
                " as it was to resume this sweep, or give it another sweep.name");
  if (state.base_config.empty()) {
    log_warn("%s holds no base config (written by an earlier shardtrain): recorded %s's now; later changes to it are "
             "refused", sweep_state_path(plan.dir).c_str(), plan.spec.base.c_str());
    state.base_config = plan.base_config;
    return true;
  }
  const std::vector<std::string> changes = base_config_changes(state.base_config, plan.base_config);
  if (changes.empty()) return false;
  std::string list;
  for (const std::string& change : changes) list += (list.empty() ? "" : ", ") + change;
  throw Error(sweep_state_path(plan.dir) + " was made from another base config: " + list +
              " (the sweep's trials ran with the values on the left; sweep.base = " + plan.spec.base +
              "): nothing was changed. Restore those values to resume this sweep, or give it another sweep.name");
}

// Trials the state lacks (removed by hand) are added, pending, in the sweep
// file's order; finished or pruned trials whose run folder or checkpoint is
// gone are pending again (their recorded evaluations are replayed with their
// decisions as they run). Returns whether the state changed.
bool restore_trials(const SweepPlan& plan, SweepState& state) {
  bool changed = false;
  std::vector<TrialRecord> trials;
  for (const TrialSpec& spec : plan.trials) {
    const auto found = std::find_if(state.trials.begin(), state.trials.end(),
                                    [&](const TrialRecord& t) { return t.spec.id == spec.id; });
    if (found != state.trials.end()) {
      trials.push_back(*found);
      continue;
    }
    log_warn("sweep state: it holds no %s (removed by hand?): the trial runs", spec.id.c_str());
    TrialRecord record;
    record.spec = spec;
    record.run_dir = spec.id;
    trials.push_back(record);
    changed = true;
  }
  changed = changed || trials.size() != state.trials.size();
  state.trials = std::move(trials);
  check_trial_files(plan.dir, state);
  for (TrialRecord& t : state.trials) {
    if (t.missing.empty()) continue;
    log_warn("%s was %s but %s: it runs again", t.spec.id.c_str(), trial_status_name(t.status), t.missing.c_str());
    t.status = TrialStatus::kPending;
    t.best_checkpoint.clear();
    t.stop_reason.clear();
    t.missing.clear();
    changed = true;
  }
  return changed;
}

// Rank 0: the sweep folder, its lock and state at the start of a job.
// Returns whether any trial is left to run.
bool prepare(const SweepPlan& plan, std::unique_ptr<RunLock>& lock) {
  std::error_code error;
  fs::create_directories(plan.dir, error);
  if (error || !fs::is_directory(plan.dir))
    throw Error("run.storage_path: cannot create the sweep folder '" + plan.dir + "': " + error.message());
  lock = std::make_unique<RunLock>(plan.dir);
  if (!lock->took_over().empty()) log_warn("took over the sweep folder's lock from %s", lock->took_over().c_str());
  if (remove_stale_sweep_state_lock(plan.dir))
    log_warn("removed %s/sweep_state.lock, left by a job that was killed while changing the state", plan.dir.c_str());
  for (const std::string& path : remove_stale_temp_files(plan.dir))
    log_warn("removed %s, a temporary file of an earlier job that did not finish", path.c_str());
  const std::string fingerprint = sweep_fingerprint(plan.spec, plan.trials);
  if (!sweep_state_exists(plan.dir)) {
    write_sweep_state(plan.dir, new_state(plan, fingerprint));
    log_info("sweep %s: %zu trials, state in %s", plan.spec.name.c_str(), plan.trials.size(),
             sweep_state_path(plan.dir).c_str());
    return true;
  }
  SweepState state = read_sweep_state(plan.dir);
  bool changed = check_recorded(plan, fingerprint, state);
  changed = restore_trials(plan, state) || changed;
  changed = changed || state.stop_requested;
  state.stop_requested = false;
  bool left = false;
  int64_t resumed = 0, done = 0;
  for (TrialRecord& t : state.trials) {
    if (t.status == TrialStatus::kRunning) {  // its job ended while it ran: it resumes
      t.status = TrialStatus::kPending;
      changed = true;
    }
    if (t.status == TrialStatus::kPending) {
      left = true;
      resumed += t.attempts > 0 ? 1 : 0;
    } else {
      ++done;
    }
  }
  if (plan.spec.asha) replay(plan.spec, state);  // reports a state whose decisions do not follow the rule
  if (changed) write_sweep_state(plan.dir, state);
  log_info("sweep %s: resuming (%lld of %zu trials done, %lld to resume from their checkpoints)", plan.spec.name.c_str(),
           static_cast<long long>(done), state.trials.size(), static_cast<long long>(resumed));
  return left;
}

class GroupWorker {
 public:
  GroupWorker(const SweepPlan& plan, MPI_Comm group, int group_index, int num_groups, int world_rank)
      : plan_(plan), group_(group), group_index_(group_index), num_groups_(num_groups), world_rank_(world_rank) {
    MPI_Comm_rank(group_, &rank_);
  }

  // Takes and runs trials until none is left; false after a stop signal.
  bool run() {
    for (;;) {
      const int64_t signalled =
          max_over_ranks(static_cast<int64_t>(preemption_requested() ? 1 : 0), group_, "sweep: checking for a stop signal");
      const std::string id = rank0_value(group_, "sweep: taking the next trial", [&]() -> std::string {
        SweepStateLock lock(plan_.dir, plan_.lock_timeout_s);
        SweepState state = read_sweep_state(plan_.dir);
        if (signalled || state.stop_requested) {
          if (!state.stop_requested) {
            state.stop_requested = true;
            write_sweep_state(plan_.dir, state);
          }
          return "";
        }
        for (TrialRecord& t : state.trials) {
          if (t.status != TrialStatus::kPending) continue;
          t.status = TrialStatus::kRunning;
          t.group = group_index_;
          t.attempts += 1;
          write_sweep_state(plan_.dir, state);
          return t.spec.id;
        }
        return "";
      });
      if (id.empty()) return signalled == 0;
      if (!run_trial(id)) return false;
    }
  }

 private:
  size_t index_of(const std::string& id) const {
    for (size_t i = 0; i < plan_.trials.size(); ++i)
      if (plan_.trials[i].id == id) return i;
    throw Error("the sweep state names trial " + id + ", which the sweep file does not make");
  }

  // "" to go on, or the reason to stop: the group's rank 0 records the
  // evaluation and decides; every rank gets the decision.
  std::string on_evaluation(const std::string& id, const std::map<std::string, double>& metrics, int64_t step) {
    const auto found = metrics.find(plan_.spec.metric);
    if (found == metrics.end()) {
      std::string names;
      for (const auto& kv : metrics) names += (names.empty() ? "" : ", ") + kv.first;
      throw Error("sweep.metric = '" + plan_.spec.metric + "': this trial's evaluation reports " + names);
    }
    const double value = found->second;
    const std::string decision = rank0_value(group_, "sweep: recording an evaluation", [&]() -> std::string {
      SweepStateLock lock(plan_.dir, plan_.lock_timeout_s);
      SweepState state = read_sweep_state(plan_.dir);
      const std::vector<const SweepEvent*> mine = state.events_of(id);
      for (const SweepEvent* e : mine) {
        if (e->step != step) continue;
        if (!same_bits(e->value, value))
          log_warn("%s: %s at step %lld is %s, the sweep recorded %s before this trial resumed (the recorded "
                   "decision stands)", id.c_str(), plan_.spec.metric.c_str(), static_cast<long long>(step),
                   shortest_text(value).c_str(), shortest_text(e->value).c_str());
        if (e->pruned && state.trial(id).status != TrialStatus::kPruned) {
          state.trial(id).status = TrialStatus::kPruned;  // run_trial reads it when train returns
          state.trial(id).stop_reason = e->reason;
          write_sweep_state(plan_.dir, state);
        }
        return (e->stop ? "1" : "0") + e->reason;
      }
      SweepEvent event;
      event.trial = id;
      event.evaluation = static_cast<int64_t>(mine.size()) + 1;
      event.step = step;
      event.value = value;
      if (plan_.spec.asha) {
        Asha asha = replay(plan_.spec, state);
        const AshaDecision d = asha.on_result(id, event.evaluation, value);
        event.stop = d.stop;
        event.pruned = d.pruned;
        event.reason = d.reason;
      } else {
        event.reason = "scheduler none";
      }
      state.events.push_back(event);
      if (event.pruned) {
        TrialRecord& t = state.trial(id);
        t.status = TrialStatus::kPruned;
        t.stop_reason = event.reason;
      }
      write_sweep_state(plan_.dir, state);
      log_info("%s: evaluation %lld at step %lld: %s %s (%s)", id.c_str(), static_cast<long long>(event.evaluation),
               static_cast<long long>(step), plan_.spec.metric.c_str(), shortest_text(value).c_str(),
               event.reason.c_str());
      return (event.stop ? "1" : "0") + event.reason;
    });
    return decision[0] == '1' ? decision.substr(1) : "";
  }

  // False after a stop signal.
  bool run_trial(const std::string& id) {
    const size_t i = index_of(id);
    const RunConfig& config = plan_.configs[i];
    const std::string run_dir = (fs::path(plan_.dir) / id).string();
    std::unique_ptr<RunLock> lock;
    const int no_checkpoint = rank0_value(group_, "sweep: the trial's run folder", [&]() -> int {
      std::error_code error;
      fs::create_directories(run_dir, error);
      if (error) throw Error("cannot create the trial's run folder " + run_dir + ": " + error.message());
      lock = std::make_unique<RunLock>(run_dir);
      for (const std::string& path : remove_stale_temp_files(run_dir))
        log_warn("removed %s, a temporary file of an earlier job that did not finish", path.c_str());
      for (const auto& entry : fs::directory_iterator(run_dir, error)) {
        const std::string name = entry.path().filename().string();
        if (name.rfind("checkpoint_", 0) == 0 && entry.path().extension() == ".h5") return 0;
      }
      return 1;
    });
    std::string params;
    for (const auto& [key, value] : plan_.trials[i].params) params += " " + key + "=" + value;
    log_info("%s on ranks %d-%d:%s", id.c_str(), world_rank_ - rank_,
             world_rank_ - rank_ + static_cast<int>(plan_.spec.ranks_per_trial) - 1, params.c_str());
    TrainOptions options;
    options.config_toml = plan_.config_tomls[i];
    options.live_progress = false;
    // No checkpoint to resume from: a job killed before its first checkpoint
    // left only records, which this trial replaces (its recorded evaluations
    // are replayed with their decisions).
    options.restart = no_checkpoint != 0;
    options.on_evaluation = [&](const std::map<std::string, double>& metrics, int64_t step) {
      return on_evaluation(id, metrics, step);
    };
    TrainResult result;
    std::string error;
    {
      LogRankScope scope(rank_, world_rank_, num_groups_ > 1 ? "[" + id + "] " : "");
      try {
        result = train(config, group_, options);
      } catch (const Error& e) {
        error = e.what();
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    on_rank0(group_, "sweep: recording the trial's end", [&] {
      SweepStateLock state_lock(plan_.dir, plan_.lock_timeout_s);
      SweepState state = read_sweep_state(plan_.dir);
      TrialRecord& t = state.trial(id);
      t.steps = result.steps;
      if (!error.empty()) {
        t.status = TrialStatus::kFailed;
        t.error = error;
        append_to_log_file((fs::path(run_dir) / "train.log").string(), "error: " + error);
        log_warn("%s failed: %s", id.c_str(), error.c_str());
      } else if (!result.finished) {
        t.status = TrialStatus::kPending;  // stopped for a signal: it resumes
        state.stop_requested = true;
      } else {
        // The evaluation that stopped it recorded whether it was pruned.
        const bool pruned = result.stopped_early && t.status == TrialStatus::kPruned;
        t.status = pruned ? TrialStatus::kPruned : TrialStatus::kFinished;
        t.stop_reason = result.stop_reason;
        t.best_checkpoint = relative_to_sweep(
            plan_, result.best_checkpoint.empty() ? result.last_checkpoint : result.best_checkpoint);
        log_info("%s %s at step %lld%s%s%s", id.c_str(), pruned ? "stopped" : "finished",
                 static_cast<long long>(result.steps), result.stop_reason.empty() ? "" : " (",
                 result.stop_reason.c_str(), result.stop_reason.empty() ? "" : ")");
      }
      write_sweep_state(plan_.dir, state);
    });
    return error.empty() ? result.finished : true;
  }

  const SweepPlan& plan_;
  MPI_Comm group_;
  int group_index_;
  int num_groups_;
  int world_rank_;
  int rank_ = 0;
};

// Every rank waits for every group with no deadline: groups finish their last
// trials at different times, hours apart on a long sweep.
void wait_for_all_groups(MPI_Comm world) {
  MPI_Request request = MPI_REQUEST_NULL;
  ST_CHECK_MPI(MPI_Ibarrier(world, &request));
  int done = 0;
  while (!done) {
    ST_CHECK_MPI(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

SweepOutcome run_sweep(const SweepPlan& plan, MPI_Comm world) {
  int rank = 0, size = 1;
  ST_CHECK_MPI(MPI_Comm_rank(world, &rank));
  ST_CHECK_MPI(MPI_Comm_size(world, &size));
  const int per_trial = static_cast<int>(plan.spec.ranks_per_trial);
  if (size % per_trial != 0)
    throw Error(str_format("sweep.ranks_per_trial = %d does not divide the job's %d ranks: start a multiple of %d "
                           "ranks, or change sweep.ranks_per_trial", per_trial, size, per_trial));
  std::unique_ptr<RunLock> lock;
  const int left = rank0_value(world, "sweep: preparing the sweep folder", [&] { return prepare(plan, lock) ? 1 : 0; });
  SweepOutcome outcome;
  outcome.nothing_to_do = left == 0;
  int64_t stopped = 0;
  if (left) {
    CommOwner group;
    ST_CHECK_MPI(MPI_Comm_split(world, rank / per_trial, rank, &group.comm));
    GroupWorker worker(plan, group.comm, rank / per_trial, size / per_trial, rank);
    stopped = worker.run() ? 0 : 1;
    wait_for_all_groups(world);
    stopped = max_over_ranks(stopped, world, "sweep: whether a group stopped for a signal");
  }
  on_rank0(world, "sweep: reading the final state", [&] { outcome.state = read_sweep_state(plan.dir); });
  if (stopped) throw Preempted("sweep stopped for a signal");
  return outcome;
}

}  // namespace shardtrain
