#include "shardtrain/comm/watchdog.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "comm/arrival_board.h"
#include "comm/watchdog_internal.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/text.h"

namespace shardtrain {
namespace {

using Clock = std::chrono::steady_clock;

// The phase sequence of one communicator, attached to it as an MPI attribute
// (so it goes away with the communicator).
struct PhaseBoard {
  std::unique_ptr<ArrivalBoard> board;
  uint64_t sequence = 0;
};

struct OpenPhase {
  std::string name;
  std::string context;  // the phases it is inside ("training step 12"), for messages
  Clock::time_point deadline;
  double timeout_s = 0;
  const char* file = "";
  int line = 0;
  int comm_size = 1;
  std::shared_ptr<PhaseBoard> board;  // null until built, and for one rank
  uint64_t sequence = 0;
};

std::atomic<double>& default_timeout() {
  static std::atomic<double> seconds{600.0};
  return seconds;
}

class Watchdog {
 public:
  // Never destroyed: the detached thread waits on its members until the process ends.
  static Watchdog& instance() {
    static Watchdog* watchdog = new Watchdog();
    return *watchdog;
  }

  uint64_t open(OpenPhase phase) {
    std::lock_guard<std::mutex> lock(mutex_);
    start_thread();
    const uint64_t id = next_id_++;
    const bool earlier = phase.deadline < wake_at_;
    open_.emplace(id, std::move(phase));
    if (earlier) wake_.notify_one();
    return id;
  }
  void set_board(uint64_t id, std::shared_ptr<PhaseBoard> board, uint64_t sequence) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = open_.find(id);
    if (it == open_.end()) return;
    it->second.board = std::move(board);
    it->second.sequence = sequence;
  }
  void close(uint64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    open_.erase(id);
  }
  void add_board(ArrivalBoard* board) {
    std::lock_guard<std::mutex> lock(mutex_);
    start_thread();
    boards_.insert(board);
  }
  void remove_board(ArrivalBoard* board) {
    std::lock_guard<std::mutex> lock(mutex_);
    boards_.erase(board);
  }

 private:
  static constexpr std::chrono::milliseconds kBeat{250};

  // Two threads: the heartbeat must go on while the deadline thread reports
  // a timeout (seconds of reading the boards), or every rank that times out
  // at the same moment would see the others as stopped.
  void start_thread() {
    if (started_) return;
    started_ = true;
    std::thread([this] { run_deadlines(); }).detach();
    std::thread([this] { run_heartbeat(); }).detach();
  }

  void run_heartbeat() {
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        for (ArrivalBoard* board : boards_) board->heartbeat();
      }
      std::this_thread::sleep_for(kBeat);
    }
  }

  void run_deadlines() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      const OpenPhase* due = nullptr;
      for (const auto& [id, phase] : open_)
        if (phase.timeout_s > 0 && (!due || phase.deadline < due->deadline)) due = &phase;
      if (due && Clock::now() >= due->deadline) {
        OpenPhase expired = *due;
        lock.unlock();
        fire(expired);
      }
      wake_at_ = due ? due->deadline : Clock::time_point::max();
      if (due)
        wake_.wait_until(lock, wake_at_);
      else
        wake_.wait(lock);
    }
  }

  [[noreturn]] static void fire(const OpenPhase& phase) {
    if (phase.comm_size == 1)
      fatal("phase timeout", phase.file, phase.line,
            str_format("%s (on this rank alone) did not complete within %s. Raise run.collective_timeout_s if "
                       "this phase is legitimately slow.",
                       phase.name.c_str(), seconds_text(phase.timeout_s).c_str()));
    const std::string missing =
        phase.board && phase.board->board
            ? phase.board->board->describe_missing(phase.sequence, "phase")
            : std::string("world ranks that did not arrive: unknown (the communicator's arrival board was not "
                          "built yet)");
    fatal("phase timeout", phase.file, phase.line,
          str_format("%s (phase #%llu on a communicator of %d ranks%s) did not complete within %s; %s. Raise "
                     "run.collective_timeout_s if this phase is legitimately slow.",
                     phase.name.c_str(), static_cast<unsigned long long>(phase.sequence), phase.comm_size,
                     phase.context.empty() ? "" : (", during " + phase.context).c_str(),
                     seconds_text(phase.timeout_s).c_str(), missing.c_str()));
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::map<uint64_t, OpenPhase> open_;
  std::set<ArrivalBoard*> boards_;
  uint64_t next_id_ = 1;
  bool started_ = false;
  Clock::time_point wake_at_ = Clock::time_point::max();
};

std::vector<std::string>& thread_phase_names() {
  thread_local std::vector<std::string> names;
  return names;
}

// ---- the board of a communicator ------------------------------------------------

int delete_board(MPI_Comm, int, void* value, void*) {
  auto* holder = static_cast<std::shared_ptr<PhaseBoard>*>(value);
  (*holder)->board.reset();  // collective (MPI_Win_free), as MPI_Comm_free is
  delete holder;
  return MPI_SUCCESS;
}

int board_keyval() {
  static const int keyval = [] {
    int k = MPI_KEYVAL_INVALID;
    ST_CHECK_MPI(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_board, &k, nullptr));
    return k;
  }();
  return keyval;
}

// MPI_COMM_WORLD's attributes may be deleted late in MPI_Finalize, when a
// window can no longer be freed; its board hangs off MPI_COMM_SELF instead,
// whose attributes MPI_Finalize deletes first, with MPI still fully up.
std::shared_ptr<PhaseBoard>& world_board() {
  static std::shared_ptr<PhaseBoard> board;
  return board;
}
int delete_world_board(MPI_Comm, int, void*, void*) {
  if (world_board()) world_board()->board.reset();
  world_board().reset();
  return MPI_SUCCESS;
}

std::shared_ptr<PhaseBoard> board_of(MPI_Comm comm) {
  if (comm == MPI_COMM_WORLD) {
    if (!world_board()) {
      auto board = std::make_shared<PhaseBoard>();
      board->board = std::make_unique<ArrivalBoard>(comm);
      world_board() = board;
      int keyval = MPI_KEYVAL_INVALID;
      ST_CHECK_MPI(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_world_board, &keyval, nullptr));
      ST_CHECK_MPI(MPI_Comm_set_attr(MPI_COMM_SELF, keyval, nullptr));
    }
    return world_board();
  }
  void* value = nullptr;
  int found = 0;
  ST_CHECK_MPI(MPI_Comm_get_attr(comm, board_keyval(), &value, &found));
  if (found) return *static_cast<std::shared_ptr<PhaseBoard>*>(value);
  auto* holder = new std::shared_ptr<PhaseBoard>(std::make_shared<PhaseBoard>());
  (*holder)->board = std::make_unique<ArrivalBoard>(comm);
  ST_CHECK_MPI(MPI_Comm_set_attr(comm, board_keyval(), holder));
  return *holder;
}

// ---- fault injection --------------------------------------------------------------

struct StopSpec {
  std::string text;
  int world_rank = 1;
};

std::optional<StopSpec> stop_spec() {
  const char* value = std::getenv("SHARDTRAIN_FAULT_STOP");
  if (!value || !*value) return std::nullopt;
  StopSpec spec;
  std::string text = value;
  const auto at = text.rfind('@');
  if (at != std::string::npos) {
    spec.world_rank = std::atoi(text.c_str() + at + 1);
    text.resize(at);
  }
  spec.text = text;
  return spec;
}

// `pattern`: parts separated by '*' that must occur in `text` in this order.
bool matches(const std::string& text, const std::string& pattern) {
  size_t at = 0, start = 0;
  while (true) {
    const size_t star = pattern.find('*', start);
    const std::string part = pattern.substr(start, star == std::string::npos ? std::string::npos : star - start);
    at = text.find(part, at);
    if (at == std::string::npos) return false;
    at += part.size();
    if (star == std::string::npos) return true;
    start = star + 1;
  }
}

void stop_here_if_asked(const std::string& phase) {
  static const std::optional<StopSpec> spec = stop_spec();
  static std::atomic<bool> stopped{false};
  if (!spec || stopped.load() || !matches(phase, spec->text)) return;
  int world_rank = -1;
  ST_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
  if (world_rank != spec->world_rank || stopped.exchange(true)) return;
  std::fprintf(stderr, "shardtrain: fault injection (SHARDTRAIN_FAULT_STOP): world rank %d stops itself inside "
               "phase '%s'\n", world_rank, phase.c_str());
  std::fflush(stderr);
  std::raise(SIGSTOP);
}

}  // namespace

namespace detail {
void register_heartbeat(ArrivalBoard* board) { Watchdog::instance().add_board(board); }
void unregister_heartbeat(ArrivalBoard* board) { Watchdog::instance().remove_board(board); }
}  // namespace detail

void set_default_phase_timeout_s(double seconds) {
  ST_ASSERT(seconds > 0, "phase timeout must be > 0");
  default_timeout().store(seconds);
}

double default_phase_timeout_s() { return default_timeout().load(); }

PhaseGuard::PhaseGuard(MPI_Comm comm, std::string phase, double timeout_s, const char* file, int line) {
  int size = 1;
  ST_CHECK_MPI(MPI_Comm_size(comm, &size));
  OpenPhase open;
  open.name = phase;
  open.context = current_phase_names();
  open.timeout_s = timeout_s > 0 ? timeout_s : timeout_s < 0 ? -1.0 : default_phase_timeout_s();
  open.deadline = open.timeout_s > 0 ? Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                          std::chrono::duration<double>(open.timeout_s))
                                     : Clock::time_point::max();
  open.file = file;
  open.line = line;
  open.comm_size = size;
  id_ = Watchdog::instance().open(std::move(open));
  thread_phase_names().push_back(phase);
  if (size > 1) {
    // Built (collectively) under this guard's deadline on first use.
    std::shared_ptr<PhaseBoard> board = board_of(comm);
    const uint64_t sequence = ++board->sequence;
    if (board->board) board->board->enter(sequence, phase.c_str());
    Watchdog::instance().set_board(id_, std::move(board), sequence);
  }
  stop_here_if_asked(phase);
}

PhaseGuard::~PhaseGuard() {
  Watchdog::instance().close(id_);
  if (!thread_phase_names().empty()) thread_phase_names().pop_back();
}

std::string current_phase_names() {
  std::string out;
  for (const std::string& name : thread_phase_names()) out += (out.empty() ? "" : " > ") + name;
  return out;
}

}  // namespace shardtrain
