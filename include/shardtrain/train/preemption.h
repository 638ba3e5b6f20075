// Stopping for SIGTERM at a step boundary (docs/DESIGN.md, "Preemption"):
// the ranks agree, in one small collective, whether any of them got SIGTERM
// (core/signals.h) and whether one emergency checkpoint can still be written
// within checkpoint.preemption_grace_s, so that every rank checkpoints the
// same step or none does.
//
//   const PreemptionDecision d = agree_on_preemption(comm, step, longest_checkpoint_s, step > saved_step);
//   if (d.stop) { if (d.write_checkpoint) save(...); stop; }
#pragma once
#include <mpi.h>

#include <cstdint>
#include <string>

namespace shardtrain {

struct PreemptionDecision {
  bool stop = false;              // some rank got SIGTERM
  bool write_checkpoint = false;  // and a checkpoint fits in what is left of the grace period
  double seconds_since_signal = 0;  // the longest over the ranks
  double estimate_s = 0;            // the write's expected time: the longest write of this job, 0 = none yet
  std::string reason;               // why no checkpoint, when stop && !write_checkpoint
};

// Collective over comm (a guarded MPI_Allreduce of three doubles, MPI_MAX):
// every rank gets the same decision. `longest_checkpoint_s` is this rank's
// longest checkpoint write in this job (0 = none yet: then the write is tried,
// and the grace period's alarm ends the job if it does not fit);
// `unsaved_steps` says steps were trained since the newest checkpoint (else
// there is nothing to save). Call it only when the handler is installed
// (preemption_grace_s() > 0), on every rank at the same step boundaries.
PreemptionDecision agree_on_preemption(MPI_Comm comm, int64_t step, double longest_checkpoint_s, bool unsaved_steps);

}  // namespace shardtrain
