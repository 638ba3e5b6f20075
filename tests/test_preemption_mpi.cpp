// The ranks' agreement to stop for SIGTERM (train/preemption.h): one rank's
// signal stops every rank at the same step boundary, and every rank decides
// the same about the emergency checkpoint: written when it fits the grace
// period (by any rank's longest write), skipped when the newest checkpoint
// already holds the step.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <mpi.h>
#include <signal.h>

#include "shardtrain/core/signals.h"
#include "shardtrain/train/preemption.h"

TEST_CASE("preemption: any rank's SIGTERM stops every rank, with a checkpoint only when it fits") {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  struct sigaction previous {};
  sigaction(SIGTERM, nullptr, &previous);
  shardtrain::install_preemption_handler(1000.0);
  shardtrain::reset_preemption_for_tests();

  shardtrain::PreemptionDecision d = shardtrain::agree_on_preemption(MPI_COMM_WORLD, 5, 0.0, true);
  CHECK_FALSE(d.stop);
  CHECK_FALSE(d.write_checkpoint);

  if (rank == size - 1) raise(SIGTERM);  // the last rank only
  CHECK(shardtrain::preemption_requested() == (rank == size - 1));
  d = shardtrain::agree_on_preemption(MPI_COMM_WORLD, 6, 0.5, true);
  CHECK(d.stop);
  CHECK(d.write_checkpoint);
  CHECK(d.estimate_s == 0.5);
  CHECK(d.seconds_since_signal >= 0.0);
  CHECK(d.seconds_since_signal < 100.0);

  // Rank 0 once took longer to write a checkpoint than the grace period allows: no rank writes.
  d = shardtrain::agree_on_preemption(MPI_COMM_WORLD, 6, rank == 0 ? 5000.0 : 0.1, true);
  CHECK(d.stop);
  CHECK_FALSE(d.write_checkpoint);
  CHECK(d.reason.find("checkpoint.preemption_grace_s") != std::string::npos);

  d = shardtrain::agree_on_preemption(MPI_COMM_WORLD, 6, 0.1, false);
  CHECK(d.stop);
  CHECK_FALSE(d.write_checkpoint);
  CHECK(d.reason == "the newest checkpoint already holds this step");

  shardtrain::reset_preemption_for_tests();
  sigaction(SIGTERM, &previous, nullptr);
}
