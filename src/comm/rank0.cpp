#include "shardtrain/comm/rank0.h"

#include <climits>

namespace shardtrain {

std::string broadcast_string(const std::string& text, MPI_Comm comm) {
  int64_t length = static_cast<int64_t>(text.size());
  ST_CHECK_MPI(MPI_Bcast(&length, 1, MPI_INT64_T, 0, comm));
  ST_ASSERT(length >= 0 && length < INT_MAX, "broadcast_string: a string of " + std::to_string(length) + " bytes");
  std::string out = text;
  out.resize(static_cast<size_t>(length));
  if (length > 0) ST_CHECK_MPI(MPI_Bcast(out.data(), static_cast<int>(length), MPI_CHAR, 0, comm));
  return out;
}

int64_t broadcast_int(int64_t value, MPI_Comm comm) {
  ST_CHECK_MPI(MPI_Bcast(&value, 1, MPI_INT64_T, 0, comm));
  return value;
}

}  // namespace shardtrain
