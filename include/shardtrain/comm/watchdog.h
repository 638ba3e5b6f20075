// Phase watchdog: no blocking phase of a job may hang it forever.
//
// A phase is any stretch of code in which a rank may wait for the others: a
// raw MPI collective, a collective HDF5 / MPI-IO open, write, read or close, a
// barrier, a broadcast of rank 0's result. Not compute (a training step, an
// evaluation): its length has no bound a timeout could know. Wrap it:
//
//   {
//     PhaseGuard guard(comm, "checkpoint write /model/classifier.weight");
//     ST_CHECK_HDF5(H5Dwrite(...));   // collective MPI-IO inside
//   }
//
// Rules, as for collectives: every rank of `comm` enters the same guards on
// `comm` in the same order. Entering a guard publishes "this rank entered phase
// #n of comm" on the communicator's arrival board (an MPI window the other
// ranks read one-sidedly, without this rank's help; built on the first guard
// on a communicator, collectively). A watchdog thread per process holds the
// deadline of every open guard. A guard still open `timeout_s` after it was
// entered makes that thread print, through the fatal path (core/check.h),
//
//   shardtrain: FATAL [host:rank 0] checkpoint.cpp:512: phase timeout: checkpoint write
//   runs/q/checkpoint_000003.h5 /model/classifier.weight (phase #41 on a communicator of 2 ranks)
//   did not complete within 10 s; world ranks that did not arrive: none (...); world ranks not
//   responding (stopped or frozen): 1 (last entered phase #41 '...'). Raise run.collective_timeout_s ...
//
// and MPI_Abort the whole job, whatever this rank's own thread is blocked in
// (MPI_Allreduce, MPI_File_write_at_all, ...). The same thread advances a
// heartbeat on every board a few times a second; a rank whose heartbeat stands
// still is reported as stopped or frozen.
//
// Timeout: the guard's argument (kNoDeadline: none), or (0) the process default, which the job
// sets once from run.collective_timeout_s (600 s until then). Guards nest; each
// has its own deadline. A guard on a communicator of one rank (MPI_COMM_SELF)
// has a deadline and no board. Cost: a mutex, a map insertion and a store per
// guard (microseconds); do not put one around each bucket of a gradient
// reduction (Communicator collectives have their own timeout).
//
// Fault injection (tests only): with SHARDTRAIN_FAULT_STOP="<pattern>@<world rank>"
// in the environment, that rank raises SIGSTOP on itself inside the first phase
// whose name matches <pattern> (parts separated by '*' that occur in this
// order, e.g. "checkpoint write*/model/"), after announcing its arrival, so
// that tests can freeze a rank exactly in a checkpoint write or an eval gather.
//
// Checked, guarded helpers for the usual small collectives (broadcast a string,
// "rank 0 does it, every rank gets its result or its Error") are in
// comm/mpi_helpers.h.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>

namespace shardtrain {

// The timeout of guards constructed with timeout_s = 0. Set it from
// run.collective_timeout_s once the config is read; must be > 0.
void set_default_phase_timeout_s(double seconds);
double default_phase_timeout_s();

class PhaseGuard {
 public:
  // A phase with a name and no deadline: for compute of unbounded length (a
  // training step, an evaluation). It does not time out itself, but it names
  // where the job is: the timeouts of the collectives and guards inside it say
  // "during training step 12", and other ranks' messages name it as this
  // rank's last phase.
  static constexpr double kNoDeadline = -1.0;

  // `phase` names the phase in messages ("checkpoint write <path> /model/x").
  // Collective over comm the first time a communicator is guarded (it builds
  // the board); afterwards local. file/line: where the guard is, for the message.
  PhaseGuard(MPI_Comm comm, std::string phase, double timeout_s = 0, const char* file = __builtin_FILE(),
             int line = __builtin_LINE());
  ~PhaseGuard();
  PhaseGuard(const PhaseGuard&) = delete;
  PhaseGuard& operator=(const PhaseGuard&) = delete;

 private:
  uint64_t id_;
};

// The phases open on the calling thread, outermost first, joined by " > "
// ("writing the report at step 12 > checkpoint write ..."); "" when none.
std::string current_phase_names();

}  // namespace shardtrain
