// SIGTERM as a request to stop (Slurm preemption, scancel, --signal=TERM@N,
// mpirun forwarding its own SIGTERM), and SIGUSR1 the same way (what Open MPI's
// mpirun forwards to the ranks, what scripts/mpirun.sh sends for a TERM or INT
// it receives, Slurm's --signal=USR1@N): the handler only records it; the
// training loop asks at every step boundary, agrees with the other ranks and
// writes one emergency checkpoint (train/preemption.h; docs/DESIGN.md,
// "Preemption").
//
//   install_preemption_handler(config.checkpoint.preemption_grace_s);   // once, before training
//   if (preemption_requested()) ...                                     // any thread, cheap
//
// A SIGTERM within 2 s of the first is the same request delivered twice
// (under Slurm, scancel and preemption signal srun and every task, and srun
// forwards its own); a later one is a second request and exits at once.
//
// The handler is async-signal-safe: it stores into lock-free atomics, reads
// CLOCK_MONOTONIC, arms alarm(2) and, on a second SIGTERM, write(2)s one line
// and _exit(2)s. The grace period is enforced by that alarm: when it rings,
// SIGALRM's handler _exit(2)s at once, whatever the process is doing. Neither
// exit touches a complete checkpoint: a checkpoint is written under a
// temporary name and renamed when complete (checkpoint/checkpoint.h), and the
// next job on the run folder removes the temporary file.
#pragma once

#include <stdexcept>

namespace shardtrain {

// The exit status of a job stopped by SIGTERM, with or without its emergency
// checkpoint: 128 + SIGTERM, what a shell reports for a job that SIGTERM
// ended. The newest complete checkpoint is intact; re-running (a Slurm
// requeue) resumes from it.
constexpr int kPreemptedExitStatus = 143;

// Installs the SIGTERM and SIGUSR1 handler (and SIGALRM's, for the grace period):
// `grace_s` > 0 is the time from the first SIGTERM within which the job ends.
// 0 installs nothing: SIGTERM ends the process at once, as by default.
// SA_RESTART, so that system calls the signal interrupts carry on.
void install_preemption_handler(double grace_s);

// Whether a SIGTERM arrived since install_preemption_handler (or the last
// reset_preemption_for_tests).
bool preemption_requested();

// Seconds since the first SIGTERM (CLOCK_MONOTONIC); 0 when none arrived.
double seconds_since_preemption_request();

// The grace period install_preemption_handler was given (0 = not installed).
double preemption_grace_s();

// Tests: forget an earlier SIGTERM and disarm the alarm.
void reset_preemption_for_tests();

// Thrown by `train` on every rank once they agreed to stop for a SIGTERM;
// run_cli turns it into kPreemptedExitStatus after a clean MPI_Finalize.
class Preempted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace shardtrain
