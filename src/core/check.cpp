#include "shardtrain/core/check.h"
#include "shardtrain/core/fatal_guard.h"

#include <hdf5.h>
#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace shardtrain {

std::string process_label() {
  char host[256] = "?";
  gethostname(host, sizeof(host) - 1);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  int rank = -1;
  if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return std::string(host) + ":rank " + (rank >= 0 ? std::to_string(rank) : std::string("?"));
}

namespace {
std::atomic<bool> g_fatal_in_progress{false};
}  // namespace

bool fatal_in_progress() { return g_fatal_in_progress.load(); }

void refuse_if_fatal_in_progress(const std::string& what) {
  if (g_fatal_in_progress.load()) throw Error(what + ": not done, a FATAL error is ending this job");
}

void detail::set_fatal_in_progress_for_test(bool value) { g_fatal_in_progress.store(value); }

void fatal(const char* library, const char* file, int line, const std::string& message) {
  g_fatal_in_progress.store(true);  // before anything that can block: see refuse_if_fatal_in_progress
  const char* base = file;
  for (const char* p = file; *p; ++p)
    if (*p == '/') base = p + 1;
  // One write so lines from different ranks do not interleave mid-line.
  std::string text = "shardtrain: FATAL [" + process_label() + "] " + base + ":" + std::to_string(line) +
                     ": " + library + ": " + message + "\n";
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

namespace detail {

void fail_mpi(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) std::snprintf(text, sizeof(text), "error %d", code);
  fatal("MPI", file, line, std::string(text) + " (in " + call + ")");
}

namespace {
herr_t collect_hdf5_message(unsigned n, const H5E_error2_t* error, void* data) {
  auto* out = static_cast<std::string*>(data);
  if (!out->empty()) out->append("; ");
  out->append(error->func_name ? error->func_name : "?");
  out->append(": ");
  out->append(error->desc ? error->desc : "?");
  return 0;
}
}  // namespace

}  // namespace detail

std::string hdf5_error_text() {
  std::string message;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, detail::collect_hdf5_message, &message);
  return message;
}

namespace detail {

void fail_hdf5(const char* call, const char* file, int line) {
  std::string message = hdf5_error_text();
  if (message.empty()) message = "call failed";
  fatal("HDF5", file, line, message + " (in " + call + ")");
}

}  // namespace detail
}  // namespace shardtrain
