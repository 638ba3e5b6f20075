// Private to comm: who has entered which collective or phase, and who is
// still alive, readable by any rank without the help of the rank asked.
//
// Each rank of a communicator publishes, in an MPI window, a slot: how many
// collectives (MpiCommunicator) or phases (PhaseGuard) it has entered on that
// communicator, the name of the last one, and a heartbeat counter that the
// process's watchdog thread advances a few times a second. When something
// times out, the waiting rank reads every slot: a rank whose count is below
// the sequence number of the stuck operation never arrived; a rank whose
// heartbeat does not move between two reads is stopped or frozen (SIGSTOP, a
// node that hangs). Reads are one-sided (MPI_Get in a passive-target epoch)
// and run on a helper thread with their own deadline, because the rank being
// asked may be wedged; with Open MPI's shared-memory transport they need no
// CPU time from the target at all.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace shardtrain {

class ArrivalBoard {
 public:
  explicit ArrivalBoard(MPI_Comm comm);  // collective over comm
  ~ArrivalBoard();
  ArrivalBoard(const ArrivalBoard&) = delete;
  ArrivalBoard& operator=(const ArrivalBoard&) = delete;

  // Records that this rank entered operation number `sequence` (1-based),
  // named `label` (a long one keeps its first 40 and last 68 bytes).
  void enter(uint64_t sequence, const char* label = nullptr);
  // Advances this rank's heartbeat: a plain store, no MPI call, so any thread
  // may call it at any time (the watchdog thread does).
  void heartbeat();

  // What the ranks that are not where they should be are doing, for a message:
  //   "world ranks that did not arrive: 1 (last entered phase #6 'eval gather');
  //    not responding (stopped or frozen): 1"
  // `noun` names the kind of operation ("collective", "phase"). Takes about
  // two seconds (two reads of the heartbeats, 1.2 s apart).
  std::string describe_missing(uint64_t sequence, const char* noun);

  // Never returns: prints which ranks did not reach collective `sequence`
  // (`operation`) within `timeout_s` and aborts the job.
  [[noreturn]] void abort_on_timeout(uint64_t sequence, const std::string& operation, double timeout_s,
                                     const char* file, int line);

 private:
  struct Entry {
    uint64_t sequence = 0;
    uint64_t heartbeat = 0;
    std::string label;
    bool read = false;  // false: the rank could not be queried in time
  };
  // Every rank's slot (this rank's read locally); nullopt without a window.
  std::optional<std::vector<Entry>> read_slots(double wait_s);

  struct Slot;
  MPI_Comm comm_;
  MPI_Win window_ = MPI_WIN_NULL;
  Slot* slot_ = nullptr;
  bool thread_multiple_ = false;
  int rank_ = 0;
  int size_ = 1;
  std::vector<int> world_ranks_;  // world rank of each rank of comm
};

}  // namespace shardtrain
