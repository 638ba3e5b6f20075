#include "shardtrain/train/run_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"
#include "shardtrain/core/log.h"

namespace shardtrain {
namespace {

std::string read_small_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string first_word(std::string text) {
  const auto end = text.find_first_of(" \t\r\n");
  if (end != std::string::npos) text.resize(end);
  return text.empty() ? "-" : text;
}

std::string this_host() {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) return "-";
  return first_word(host);
}

std::string this_pid_namespace() {
  char target[128] = {0};
  const ssize_t n = readlink("/proc/self/ns/pid", target, sizeof(target) - 1);
  return n > 0 ? first_word(std::string(target, static_cast<size_t>(n))) : "-";
}

// Field 22 of /proc/<pid>/stat: when the process started, in clock ticks since
// boot; tells a pid that was reused from the process that held the lock. 0
// when unknown.
unsigned long long process_start_ticks(long pid) {
  const std::string stat = read_small_file("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');  // the command name may contain spaces
  if (close == std::string::npos) return 0;
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i)
    if (i == 22) return std::strtoull(field.c_str(), nullptr, 10);
  return 0;
}

// Who holds a lock: one line of key=value words.
struct Holder {
  std::string host = "-", boot = "-", pid_namespace = "-", job = "-";
  long restart = -1;  // SLURM_RESTART_COUNT of the job; -1 outside a requeued Slurm job
  long pid = 0;
  unsigned long long start_ticks = 0;
  long long since = 0;  // unix seconds

  std::string line() const {
    return str_format("host=%s boot=%s pidns=%s pid=%ld start=%llu job=%s restart=%ld since=%lld\n", host.c_str(),
                      boot.c_str(), pid_namespace.c_str(), pid, start_ticks, job.c_str(), restart, since);
  }
  static bool parse(const std::string& text, Holder* out) {
    std::istringstream words(text);
    std::string word;
    bool have_pid = false;
    while (words >> word) {
      const auto eq = word.find('=');
      if (eq == std::string::npos) continue;
      const std::string key = word.substr(0, eq), value = word.substr(eq + 1);
      if (key == "host") out->host = value;
      else if (key == "boot") out->boot = value;
      else if (key == "pidns") out->pid_namespace = value;
      else if (key == "job") out->job = value;
      else if (key == "restart") out->restart = std::strtol(value.c_str(), nullptr, 10);
      else if (key == "pid") have_pid = (out->pid = std::strtol(value.c_str(), nullptr, 10)) > 0;
      else if (key == "start") out->start_ticks = std::strtoull(value.c_str(), nullptr, 10);
      else if (key == "since") out->since = std::strtoll(value.c_str(), nullptr, 10);
    }
    return have_pid;
  }
  std::string describe() const {
    char when[64] = "?";
    const std::time_t t = static_cast<std::time_t>(since);
    std::tm utc {};
    if (since > 0 && gmtime_r(&t, &utc)) std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &utc);
    return "host " + host + ", pid " + std::to_string(pid) + (job != "-" ? ", job " + job : "") + " (since " + when + ")";
  }
};

Holder this_process(const std::string& job_id) {
  Holder h;
  h.host = this_host();
  h.boot = first_word(read_small_file("/proc/sys/kernel/random/boot_id"));
  h.pid_namespace = this_pid_namespace();
  h.pid = static_cast<long>(getpid());
  h.start_ticks = process_start_ticks(h.pid);
  const char* slurm = std::getenv("SLURM_JOB_ID");
  h.job = first_word(!job_id.empty() ? job_id : (slurm && *slurm ? slurm : "-"));
  const char* restart = std::getenv("SLURM_RESTART_COUNT");
  if (slurm && *slurm && restart && *restart) h.restart = std::strtol(restart, nullptr, 10);
  h.since = static_cast<long long>(std::time(nullptr));
  return h;
}

bool same_machine(const Holder& a, const Holder& b) {
  return a.host == b.host && a.boot == b.boot && a.pid_namespace == b.pid_namespace && a.boot != "-";
}

// The state letter of /proc/<pid>/stat ('R', 'S', ..., 'Z' for a zombie), or 0.
char process_state(long pid) {
  const std::string stat = read_small_file("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() ? stat[close + 2] : 0;
}

// Whether `holder` (on this machine) is still running. A process killed with
// SIGKILL stays a zombie until its parent reaps it (in a container whose init
// does not reap, for good): kill(pid, 0) still succeeds, but it holds nothing.
bool still_running(const Holder& holder) {
  if (kill(static_cast<pid_t>(holder.pid), 0) != 0 && errno == ESRCH) return false;
  const char state = process_state(holder.pid);
  if (state == 'Z' || state == 'X') return false;
  const unsigned long long start = process_start_ticks(holder.pid);
  return holder.start_ticks == 0 || start == 0 || start == holder.start_ticks;
}

double mtime_s(const struct stat& info) {
  return static_cast<double>(info.st_mtim.tv_sec) + 1e-9 * static_cast<double>(info.st_mtim.tv_nsec);
}

}  // namespace

std::string run_lock_path(const std::string& run_dir) { return run_dir + "/.shardtrain.lock"; }

struct RunLock::Impl {
  std::string path;
  std::string line;  // what this process wrote
  std::string took_over;
  dev_t device = 0;
  ino_t inode = 0;
  double heartbeat_s = 30;
  std::mutex mutex;
  std::condition_variable stop_requested;
  bool stop = false;
  std::thread heartbeat;

  // Whether the lock file is still the one this process linked.
  bool still_ours() const {
    struct stat info {};
    return stat(path.c_str(), &info) == 0 && info.st_dev == device && info.st_ino == inode;
  }

  void beat() {
    std::unique_lock<std::mutex> lock(mutex);
    while (!stop_requested.wait_for(lock, std::chrono::duration<double>(heartbeat_s), [&] { return stop; })) {
      if (!still_ours()) {
        log_warn("%s was removed or replaced by another job; this job no longer holds the run folder's lock",
                 path.c_str());
        return;
      }
      utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // mtime = now, by the file system's clock
    }
  }
};

RunLock::RunLock(const std::string& run_dir, const RunLockOptions& options) : impl_(std::make_unique<Impl>()) {
  Impl& r = *impl_;
  r.path = run_lock_path(run_dir);
  r.heartbeat_s = options.heartbeat_s;
  const Holder me = this_process(options.job_id);
  r.line = me.line();
  // This process's own file, linked to the lock's name: the holder line is
  // complete before the lock exists.
  const std::string mine = r.path + ".tmp-" + me.host + "-" + std::to_string(me.pid);
  const std::string aside = r.path + ".stale-" + me.host + "-" + std::to_string(me.pid);
  for (int attempt = 0;; ++attempt) {
    write_file_atomic(mine, r.line);
    if (link(mine.c_str(), r.path.c_str()) == 0) break;
    const int error = errno;
    if (error != EEXIST) {
      std::remove(mine.c_str());
      throw Error("cannot take the run folder's lock " + r.path + ": " + os_error_text(error));
    }
    const std::string text = read_small_file(r.path);
    struct stat lock_info {}, my_info {};
    const bool have_times = stat(r.path.c_str(), &lock_info) == 0 && stat(mine.c_str(), &my_info) == 0;
    Holder holder;
    if (text.empty() && !have_times) continue;  // released meanwhile: try again
    const bool parsed = Holder::parse(text, &holder);
    const double age_s = have_times ? mtime_s(my_info) - mtime_s(lock_info) : 0;
    std::string stale_because;
    if (!parsed && age_s > options.stale_after_s)
      stale_because = "an unreadable lock file, untouched for " + str_format("%.0f s", age_s);
    else if (parsed && same_machine(holder, me) && holder.pid == me.pid)
      stale_because = "";  // this very process: a second RunLock, refused below
    else if (parsed && same_machine(holder, me) && !still_running(holder))
      stale_because = "the process is gone";
    else if (parsed && holder.job != "-" && holder.job == me.job && holder.restart < me.restart)
      stale_because = "an earlier run of this Slurm job, which Slurm has restarted (SLURM_RESTART_COUNT " +
                      std::to_string(me.restart) + ")";
    else if (parsed && !same_machine(holder, me) && age_s > options.stale_after_s)
      // Only a holder on another machine is judged by its heartbeat: one on
      // this machine is alive (checked above), however late its heartbeat
      // (a loaded node, a slow start under a sanitizer).
      stale_because = str_format("no heartbeat for %.0f s", age_s);
    if (stale_because.empty() || attempt >= 20) {
      std::remove(mine.c_str());
      const std::string who = parsed ? holder.describe() : "an unknown job (unreadable lock file)";
      throw Error("run folder " + run_dir + " is in use by another job: " + who + ", lock file " + r.path +
                  ". Wait for that job to end or use another run.name; if it is gone, remove the lock file "
                  "(a lock on another host is taken over after " +
                  str_format("%.0f", options.stale_after_s) + " s without a heartbeat)");
    }
    // Take it over: only one contender's rename succeeds, and only if the
    // file renamed is the stale one judged above is it removed.
    if (std::rename(r.path.c_str(), aside.c_str()) != 0) continue;  // someone else was quicker
    if (read_small_file(aside) != text) {
      if (link(aside.c_str(), r.path.c_str()) != 0) {
        // The lock was taken again meanwhile; what was renamed goes back only
        // if nobody holds the name now.
      }
      std::remove(aside.c_str());
      continue;
    }
    std::remove(aside.c_str());
    r.took_over = (parsed ? holder.describe() : std::string("an unknown job")) + ": " + stale_because;
  }
  std::remove(mine.c_str());
  struct stat info {};
  if (stat(r.path.c_str(), &info) != 0) throw Error("cannot take the run folder's lock " + r.path + ": it vanished");
  r.device = info.st_dev;
  r.inode = info.st_ino;
  r.heartbeat = std::thread([&r] { r.beat(); });
}

RunLock::~RunLock() {
  Impl& r = *impl_;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    r.stop = true;
  }
  r.stop_requested.notify_all();
  if (r.heartbeat.joinable()) r.heartbeat.join();
  if (r.still_ours() && read_small_file(r.path) == r.line) std::remove(r.path.c_str());
}

const std::string& RunLock::path() const { return impl_->path; }
const std::string& RunLock::took_over() const { return impl_->took_over; }

}  // namespace shardtrain
