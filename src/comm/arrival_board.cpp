#include "comm/arrival_board.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

#include "comm/watchdog_internal.h"
#include "shardtrain/comm/watchdog.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/text.h"

namespace shardtrain {

// One cache line per rank. sequence and heartbeat are written with atomic
// stores; the label is written before the sequence that announces it, and a
// reader may see a torn label (it is only printed).
struct ArrivalBoard::Slot {
  uint64_t sequence = 0;
  uint64_t heartbeat = 0;
  char label[112] = {0};
};

ArrivalBoard::ArrivalBoard(MPI_Comm comm) : comm_(comm) {
  int provided = MPI_THREAD_SINGLE;
  ST_CHECK_MPI(MPI_Query_thread(&provided));
  thread_multiple_ = provided >= MPI_THREAD_MULTIPLE;
  ST_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
  ST_CHECK_MPI(MPI_Comm_size(comm_, &size_));
  MPI_Group group = MPI_GROUP_NULL, world_group = MPI_GROUP_NULL;
  ST_CHECK_MPI(MPI_Comm_group(comm_, &group));
  ST_CHECK_MPI(MPI_Comm_group(MPI_COMM_WORLD, &world_group));
  std::vector<int> ranks(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) ranks[static_cast<size_t>(r)] = r;
  world_ranks_.assign(static_cast<size_t>(size_), -1);
  ST_CHECK_MPI(MPI_Group_translate_ranks(group, size_, ranks.data(), world_group, world_ranks_.data()));
  ST_CHECK_MPI(MPI_Group_free(&group));
  ST_CHECK_MPI(MPI_Group_free(&world_group));

  // MPI_Win_create over our own memory rather than MPI_Win_allocate: Open MPI
  // 4.1's shared-memory window component fails on some sub-communicators.
  slot_ = new Slot();
  int created = MPI_Win_create(slot_, sizeof(Slot), 1, MPI_INFO_NULL, comm_, &window_);
  // The board is a diagnostic: if any rank cannot create the window, all go
  // without it and a timeout reports the missing ranks as unknown.
  int ok = created == MPI_SUCCESS ? 1 : 0, all_ok = 0;
  ST_CHECK_MPI(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm_));
  if (!all_ok) {
    if (created == MPI_SUCCESS) ST_CHECK_MPI(MPI_Win_free(&window_));
    window_ = MPI_WIN_NULL;
  } else {
    ST_CHECK_MPI(MPI_Win_set_errhandler(window_, MPI_ERRORS_RETURN));
    // One passive-target epoch for the window's whole life: reads need no
    // cooperation from the target beyond MPI progress.
    ST_CHECK_MPI(MPI_Win_lock_all(MPI_MODE_NOCHECK, window_));
  }
  detail::register_heartbeat(this);
}

ArrivalBoard::~ArrivalBoard() {
  // First, so the watchdog thread never touches a slot being freed.
  detail::unregister_heartbeat(this);
  if (window_ != MPI_WIN_NULL) {
    ST_CHECK_MPI(MPI_Win_unlock_all(window_));
    ST_CHECK_MPI(MPI_Win_free(&window_));
  }
  delete slot_;
}

void ArrivalBoard::enter(uint64_t sequence, const char* label) {
  const size_t room = sizeof(slot_->label) - 1;
  const size_t length = label ? std::strlen(label) : 0;
  if (length <= room) {
    std::memcpy(slot_->label, label ? label : "", length);
    slot_->label[length] = '\0';
  } else {
    // Long names ("checkpoint write <path>: /model/<tensor>") keep both ends.
    const size_t head = 40, tail = room - head - 3;
    std::memcpy(slot_->label, label, head);
    std::memcpy(slot_->label + head, "...", 3);
    std::memcpy(slot_->label + head + 3, label + length - tail, tail);
    slot_->label[room] = '\0';
  }
  __atomic_store_n(&slot_->sequence, sequence, __ATOMIC_RELEASE);
  if (window_ != MPI_WIN_NULL) ST_CHECK_MPI(MPI_Win_sync(window_));
}

void ArrivalBoard::heartbeat() { __atomic_fetch_add(&slot_->heartbeat, 1, __ATOMIC_RELAXED); }

std::optional<std::vector<ArrivalBoard::Entry>> ArrivalBoard::read_slots(double wait_s) {
  if (window_ == MPI_WIN_NULL || !thread_multiple_) return std::nullopt;
  // Shared with the reader thread, which may outlive this frame if a target hangs.
  struct Reading {
    std::vector<Slot> slots;
    std::atomic<int> num_read{0};
  };
  auto reading = std::make_shared<Reading>();
  reading->slots.resize(static_cast<size_t>(size_));
  MPI_Win window = window_;
  const int size = size_;
  std::thread reader([reading, window, size]() {
    for (int r = 0; r < size; ++r) {
      // The fatal path: a failing read leaves the rank unread, nothing more.
      if (MPI_Get(&reading->slots[static_cast<size_t>(r)], sizeof(Slot), MPI_BYTE, r, 0, sizeof(Slot), MPI_BYTE,
                  window) != MPI_SUCCESS ||
          MPI_Win_flush(r, window) != MPI_SUCCESS)
        return;
      reading->num_read.store(r + 1);
    }
  });
  reader.detach();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  while (reading->num_read.load() < size && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const int num_read = reading->num_read.load();
  std::vector<Entry> entries(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    Entry& e = entries[static_cast<size_t>(r)];
    const Slot& s = r == rank_ ? *slot_ : reading->slots[static_cast<size_t>(r)];
    e.read = r == rank_ || r < num_read;
    if (!e.read) continue;
    e.sequence = __atomic_load_n(&s.sequence, __ATOMIC_ACQUIRE);
    e.heartbeat = __atomic_load_n(&s.heartbeat, __ATOMIC_RELAXED);
    e.label.assign(s.label, strnlen(s.label, sizeof(s.label)));
  }
  return entries;
}

std::string ArrivalBoard::describe_missing(uint64_t sequence, const char* noun) {
  const auto first = read_slots(5.0);
  if (!first) return "world ranks that did not arrive: unknown (the ranks could not be queried)";
  // The watchdog thread of every live process beats every 0.25 s: 1.2 s is
  // several beats, so a heartbeat that did not move means a stopped process.
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  const auto second = read_slots(3.0);
  std::string missing, unknown, frozen;
  for (int r = 0; r < size_; ++r) {
    const Entry& a = (*first)[static_cast<size_t>(r)];
    const std::string who = std::to_string(world_ranks_[static_cast<size_t>(r)]);
    if (!a.read) {
      unknown += (unknown.empty() ? "" : ", ") + who;
      continue;
    }
    const std::string last = str_format("last entered %s #%llu%s", noun, static_cast<unsigned long long>(a.sequence),
                                        a.label.empty() ? "" : (" '" + a.label + "'").c_str());
    if (a.sequence < sequence) missing += (missing.empty() ? "" : ", ") + who + " (" + last + ")";
    if (r == rank_ || !second) continue;
    const Entry& b = (*second)[static_cast<size_t>(r)];
    if (b.read && b.heartbeat == a.heartbeat) frozen += (frozen.empty() ? "" : ", ") + who + " (" + last + ")";
  }
  std::string out = "world ranks that did not arrive: " +
                    (missing.empty() ? std::string("none (all arrived; the operation itself is stuck)") : missing);
  if (!frozen.empty()) out += "; world ranks not responding (stopped or frozen): " + frozen;
  if (!unknown.empty()) out += "; world ranks that could not be queried: " + unknown;
  return out;
}

void ArrivalBoard::abort_on_timeout(uint64_t sequence, const std::string& operation, double timeout_s,
                                    const char* file, int line) {
  const std::string missing = describe_missing(sequence, "collective");
  const std::string phases = current_phase_names();
  fatal("collective timeout", file, line,
        str_format("%s (collective #%llu on a communicator of %d ranks%s) did not complete within %s; %s. Raise "
                   "run.collective_timeout_s if this step is legitimately slow.",
                   operation.c_str(), static_cast<unsigned long long>(sequence), size_,
                   phases.empty() ? "" : (", during " + phases).c_str(), seconds_text(timeout_s).c_str(),
                   missing.c_str()));
}

}  // namespace shardtrain
