#include "shardtrain/train/preemption.h"

#include "shardtrain/comm/mpi_helpers.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/signals.h"

namespace shardtrain {

PreemptionDecision agree_on_preemption(MPI_Comm comm, int64_t step, double longest_checkpoint_s, bool unsaved_steps) {
  // MPI_MAX of (got SIGTERM, seconds since it, longest write): any rank's
  // signal stops all, and the decision below is a function of the reduced
  // values only, so it is the same everywhere.
  double values[3] = {preemption_requested() ? 1.0 : 0.0, seconds_since_preemption_request(), longest_checkpoint_s};
  all_reduce_in_place(values, 3, MPI_DOUBLE, MPI_MAX, comm,
                      str_format("preemption check after step %lld", static_cast<long long>(step)));
  PreemptionDecision d;
  d.stop = values[0] > 0;
  if (!d.stop) return d;
  d.seconds_since_signal = values[1];
  d.estimate_s = values[2];
  const double left_s = preemption_grace_s() - d.seconds_since_signal;
  if (!unsaved_steps)
    d.reason = "the newest checkpoint already holds this step";
  else if (d.estimate_s > 0 && d.estimate_s > left_s)
    d.reason = str_format("a checkpoint took up to %.1f s in this job and %.1f s of checkpoint.preemption_grace_s "
                          "are left",
                          d.estimate_s, left_s > 0 ? left_s : 0.0);
  d.write_checkpoint = d.reason.empty();
  return d;
}

}  // namespace shardtrain
