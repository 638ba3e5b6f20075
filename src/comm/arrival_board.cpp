#include "comm/arrival_board.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain {

ArrivalBoard::ArrivalBoard(MPI_Comm comm) : comm_(comm) {
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  thread_multiple_ = provided >= MPI_THREAD_MULTIPLE;
  // MPI_Win_create over our own memory rather than MPI_Win_allocate: Open MPI
  // 4.1's shared-memory window component fails on some sub-communicators.
  slot_ = new uint64_t(0);
  int created = MPI_Win_create(slot_, sizeof(uint64_t), sizeof(uint64_t), MPI_INFO_NULL, comm_, &window_);
  // The board is a diagnostic: if any rank cannot create the window, all go
  // without it and a timeout reports the missing ranks as unknown.
  int ok = created == MPI_SUCCESS ? 1 : 0, all_ok = 0;
  ST_CHECK_MPI(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm_));
  if (!all_ok) {
    if (created == MPI_SUCCESS) MPI_Win_free(&window_);
    window_ = MPI_WIN_NULL;
    return;
  }
  ST_CHECK_MPI(MPI_Win_set_errhandler(window_, MPI_ERRORS_RETURN));
  // One passive-target epoch for the window's whole life: reads need no
  // cooperation from the target beyond MPI progress.
  ST_CHECK_MPI(MPI_Win_lock_all(MPI_MODE_NOCHECK, window_));
}

ArrivalBoard::~ArrivalBoard() {
  if (window_ != MPI_WIN_NULL) {
    MPI_Win_unlock_all(window_);
    MPI_Win_free(&window_);
  }
  delete slot_;
}

void ArrivalBoard::enter(uint64_t sequence) {
  __atomic_store_n(slot_, sequence, __ATOMIC_RELEASE);
  if (window_ != MPI_WIN_NULL) MPI_Win_sync(window_);
}

void ArrivalBoard::abort_on_timeout(uint64_t sequence, const std::string& operation, double timeout_s,
                                    const char* file, int line) {
  int size = 1, me = 0;
  MPI_Comm_size(comm_, &size);
  MPI_Comm_rank(comm_, &me);
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Group group = MPI_GROUP_NULL, world_group = MPI_GROUP_NULL;
  MPI_Comm_group(comm_, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);

  // Shared with the reader thread, which may outlive this frame if a target hangs.
  struct Reading {
    std::vector<uint64_t> counts;
    std::atomic<bool> done{false};
  };
  auto reading = std::make_shared<Reading>();
  reading->counts.assign(static_cast<size_t>(size), 0);
  std::string missing;
  bool answered = false;
  if (thread_multiple_ && window_ != MPI_WIN_NULL) {
    MPI_Win window = window_;
    std::thread reader([reading, window, size]() {
      for (int r = 0; r < size; ++r) {
        MPI_Get(&reading->counts[static_cast<size_t>(r)], 1, MPI_UINT64_T, r, 0, 1, MPI_UINT64_T, window);
        MPI_Win_flush(r, window);
      }
      reading->done.store(true);
    });
    reader.detach();
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!reading->done.load() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    answered = reading->done.load();
  }
  if (answered) {
    for (int r = 0; r < size; ++r) {
      if (reading->counts[static_cast<size_t>(r)] >= sequence) continue;
      int as_world = -1;
      MPI_Group_translate_ranks(group, 1, &r, world_group, &as_world);
      if (!missing.empty()) missing += ", ";
      missing += std::to_string(as_world) + " (last entered collective #" +
                 std::to_string(reading->counts[static_cast<size_t>(r)]) + ")";
    }
    if (missing.empty()) missing = "none (all arrived; the collective itself is stuck)";
  } else {
    missing = "unknown (the ranks could not be queried)";
  }
  fatal("collective timeout", file, line,
        str_format("%s (collective #%llu on a communicator of %d ranks) did not complete within %.0f s; "
                   "world ranks that did not arrive: %s. Raise run.collective_timeout_s if this step is "
                   "legitimately slow.",
                   operation.c_str(), static_cast<unsigned long long>(sequence), size, timeout_s,
                   missing.c_str()));
}

}  // namespace shardtrain
