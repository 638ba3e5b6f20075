// Errors: one check macro per C library, one fatal path, one user-error type.
//
// Library calls are wrapped in ST_CHECK_MPI / ST_CHECK_NCCL / ST_CHECK_CUDA /
// ST_CHECK_HDF5. A failing call ends in shardtrain::fatal(), which prints
//   shardtrain: FATAL [host:rank r] file.cpp:42: MPI: <library message> (in <call>)
// to stderr and calls MPI_Abort so that no rank is left waiting in a collective.
//
// Mistakes a user can fix (a bad config value, a missing file, a malformed data
// row) are thrown as shardtrain::Error with a message that names the thing to
// fix; main() reports them and exits with status 2.
#pragma once

#include <stdexcept>
#include <string>

namespace shardtrain {

// A problem with the user's input: config, flags, files, data rows.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Prints "[host:rank r] file:line: library: message" and aborts the whole job
// (MPI_Abort when MPI is up, std::abort otherwise). Never returns.
[[noreturn]] void fatal(const char* library, const char* file, int line, const std::string& message);

// The host name and world rank used in every fatal message ("node07:rank 3").
std::string process_label();

// HDF5's current error stack as one line, innermost last
// ("H5Fopen: unable to open file; H5F_open: truncated file: eof = ..."), or ""
// when it is empty. For messages that turn an HDF5 failure into an Error.
std::string hdf5_error_text();

namespace detail {
[[noreturn]] void fail_mpi(int code, const char* call, const char* file, int line);
[[noreturn]] void fail_hdf5(const char* call, const char* file, int line);
}  // namespace detail

}  // namespace shardtrain

#define ST_CHECK_MPI(call)                                                        \
  do {                                                                            \
    int st_mpi_rc_ = (call);                                                      \
    if (st_mpi_rc_ != 0) ::shardtrain::detail::fail_mpi(st_mpi_rc_, #call, __FILE__, __LINE__); \
  } while (0)

// HDF5 calls return a negative value (herr_t or hid_t) on failure.
#define ST_CHECK_HDF5(call)                                                       \
  ([&]() {                                                                        \
    auto st_h5_rc_ = (call);                                                      \
    if (st_h5_rc_ < 0) ::shardtrain::detail::fail_hdf5(#call, __FILE__, __LINE__); \
    return st_h5_rc_;                                                             \
  }())

// Invariant inside shardtrain itself (not user input): abort the job.
#define ST_ASSERT(cond, message)                                                  \
  do {                                                                            \
    if (!(cond)) ::shardtrain::fatal("shardtrain", __FILE__, __LINE__,            \
                                     std::string("assertion `" #cond "` failed: ") + (message)); \
  } while (0)
