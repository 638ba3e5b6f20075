// Running a sweep inside one allocation (docs/sweeps.md; docs/DESIGN.md,
// "Sweeps"): the world splits into world_size / ranks_per_trial groups
// (MPI_Comm_split, consecutive ranks together); each group's rank 0 takes the
// next pending trial from the state file (sweep/state.h) under its lock, the
// group runs `train` on its own communicator in the trial's run folder
// <sweep folder>/<trial id>, and takes the next trial when it is done, so
// trials go to groups as groups free up.
//
// At every evaluation (TrainOptions::on_evaluation) the group's rank 0
// records sweep.metric in the state's event log and, with ASHA, the rebuilt
// rungs decide whether the trial goes on (sweep/asha.h); the decision and its
// reason are recorded with it, and the group gets it by broadcast. An
// evaluation the log already holds (a resumed trial repeating the steps after
// its checkpoint, bit for bit) gets its recorded decision again.
//
// A trial whose `train` throws is recorded as failed with its error, and the
// group goes on. SIGTERM / SIGUSR1 stops each group's trial at its next step
// boundary with an emergency checkpoint (train/preemption.h), the trial stays
// pending, no group takes another trial, and run_sweep throws Preempted on
// every rank. Re-running resumes: finished, pruned and failed trials are never
// run again; pending ones resume from their newest checkpoint. A finished or
// pruned trial whose run folder or checkpoint is gone, and a trial the state
// does not hold, are pending again (sweep/state.h, check_trial_files).
#pragma once
#include <mpi.h>

#include <map>
#include <string>
#include <vector>

#include "shardtrain/core/run_config.h"
#include "shardtrain/sweep/space.h"
#include "shardtrain/sweep/state.h"

namespace shardtrain {

struct SweepPlan {
  SweepSpec spec;
  std::string dir;                       // <base run.storage_path>/<sweep.name>
  std::vector<TrialSpec> trials;
  std::vector<RunConfig> configs;        // validated, one per trial (run.storage_path = dir, run.name = id)
  std::vector<std::string> config_tomls; // saved with each trial's run
  // The base config's resolved values but the keys the sweep sets
  // (SweepState::base_config): a sweep folder made from another base is refused.
  std::map<std::string, std::string> base_config;
  double lock_timeout_s = 600;           // the base config's run.collective_timeout_s
};

struct SweepOutcome {
  SweepState state;        // at the end (rank 0; empty elsewhere)
  bool nothing_to_do = false;  // every trial was done before this job started
};

// Collective over `world` (every rank, the same plan). Rank 0 takes the sweep
// folder's RunLock for the whole job. Throws Error for a sweep folder whose
// state was made from other trials or another base config (naming the keys
// that differ), and Preempted after a stop signal.
SweepOutcome run_sweep(const SweepPlan& plan, MPI_Comm world);

}  // namespace shardtrain
