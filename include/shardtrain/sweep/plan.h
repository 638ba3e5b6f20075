// A sweep's plan (docs/sweeps.md): the sweep file read, its base run config
// loaded, its metric checked against the base's task, and every trial's
// config loaded and validated as `train` would load it, before any trial
// starts: a bad value stops the sweep here, naming the trial and the key.
//
//   SweepPlan plan = make_sweep_plan("configs/sweep_quickstart.toml", world_size);
//   SweepOutcome outcome = run_sweep(plan, world.comm());   // sweep/runner.h
#pragma once

#include <string>

#include "shardtrain/sweep/runner.h"

namespace shardtrain {

// Error naming the sweep file, the trial and the key for anything wrong:
// ranks_per_trial not dividing `world_size`, a base config that is a folder or
// does not load, no data.eval_file, a metric the task never reports, a
// trial's value refused.
SweepPlan make_sweep_plan(const std::string& sweep_file, int world_size);

}  // namespace shardtrain
