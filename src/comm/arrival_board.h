// Private to comm: who has entered which collective, readable by any rank.
//
// Each rank of a communicator publishes, in an MPI window, how many collectives
// it has entered on that communicator. When a collective times out, the waiting
// rank reads every rank's count: a rank whose count is below the sequence
// number of the stuck collective never arrived. Reads run on a helper thread
// with their own deadline, because the rank being asked may be wedged.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>

namespace shardtrain {

class ArrivalBoard {
 public:
  explicit ArrivalBoard(MPI_Comm comm);  // collective over comm
  ~ArrivalBoard();
  ArrivalBoard(const ArrivalBoard&) = delete;
  ArrivalBoard& operator=(const ArrivalBoard&) = delete;

  // Records that this rank entered collective number `sequence` (1-based).
  void enter(uint64_t sequence);

  // Never returns: prints which ranks did not reach collective `sequence`
  // (`operation`) within `timeout_s` and aborts the job.
  [[noreturn]] void abort_on_timeout(uint64_t sequence, const std::string& operation, double timeout_s,
                                     const char* file, int line);

 private:
  MPI_Comm comm_;
  MPI_Win window_ = MPI_WIN_NULL;
  uint64_t* slot_ = nullptr;
  bool thread_multiple_ = false;
};

}  // namespace shardtrain
