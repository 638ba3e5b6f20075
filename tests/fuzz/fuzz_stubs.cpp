// What the fuzz targets link instead of src/core/check.cpp, which needs MPI and
// HDF5: an ST_ASSERT (an invariant of shardtrain, not a user error) aborts,
// which libFuzzer reports as a crash with the message.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "shardtrain/core/check.h"

namespace shardtrain {

void fatal(const char* library, const char* file, int line, const std::string& message) {
  std::fprintf(stderr, "shardtrain: FATAL %s:%d: %s: %s\n", file, line, library, message.c_str());
  std::abort();
}

std::string process_label() { return "fuzz"; }

std::string hdf5_error_text() { return ""; }

}  // namespace shardtrain
