#include "shardtrain/comm/mpi_helpers.h"

#include <climits>

#include "shardtrain/core/log.h"

namespace shardtrain {
namespace {

int checked_count(size_t count, const std::string& phase) {
  if (count > static_cast<size_t>(INT_MAX))
    throw Error(phase + ": " + std::to_string(count) + " bytes exceed MPI's int count limit");
  return static_cast<int>(count);
}

template <class T>
T reduce_one(T value, MPI_Datatype type, MPI_Op op, MPI_Comm comm, const std::string& phase) {
  all_reduce_in_place(&value, 1, type, op, comm, phase);
  return value;
}

}  // namespace

std::string broadcast_string(const std::string& text, MPI_Comm comm, const std::string& phase, int root) {
  PhaseGuard guard(comm, phase);
  int64_t length = static_cast<int64_t>(text.size());
  ST_CHECK_MPI(MPI_Bcast(&length, 1, MPI_INT64_T, root, comm));
  std::string out = text;
  out.resize(static_cast<size_t>(length));
  if (length > 0) ST_CHECK_MPI(MPI_Bcast(out.data(), checked_count(out.size(), phase), MPI_CHAR, root, comm));
  return out;
}

void all_reduce_in_place(void* data, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm, const std::string& phase) {
  PhaseGuard guard(comm, phase);
  ST_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, data, count, type, op, comm));
}

int64_t max_over_ranks(int64_t value, MPI_Comm comm, const std::string& phase) {
  return reduce_one(value, MPI_INT64_T, MPI_MAX, comm, phase);
}
int64_t min_over_ranks(int64_t value, MPI_Comm comm, const std::string& phase) {
  return reduce_one(value, MPI_INT64_T, MPI_MIN, comm, phase);
}
double max_over_ranks(double value, MPI_Comm comm, const std::string& phase) {
  return reduce_one(value, MPI_DOUBLE, MPI_MAX, comm, phase);
}
double sum_over_ranks(double value, MPI_Comm comm, const std::string& phase) {
  return reduce_one(value, MPI_DOUBLE, MPI_SUM, comm, phase);
}

std::vector<std::string> all_gather_strings(const std::string& mine, MPI_Comm comm, const std::string& phase) {
  PhaseGuard guard(comm, phase);
  int size = 1;
  ST_CHECK_MPI(MPI_Comm_size(comm, &size));
  const int my_length = checked_count(mine.size(), phase);
  std::vector<int> lengths(static_cast<size_t>(size)), offsets(static_cast<size_t>(size));
  ST_CHECK_MPI(MPI_Allgather(&my_length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm));
  size_t total = 0;
  for (int r = 0; r < size; ++r) {
    offsets[static_cast<size_t>(r)] = checked_count(total, phase);
    total += static_cast<size_t>(lengths[static_cast<size_t>(r)]);
  }
  checked_count(total, phase);
  std::string all(total, '\0');
  ST_CHECK_MPI(MPI_Allgatherv(mine.data(), my_length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR,
                              comm));
  std::vector<std::string> out(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r)
    out[static_cast<size_t>(r)] = all.substr(static_cast<size_t>(offsets[static_cast<size_t>(r)]),
                                             static_cast<size_t>(lengths[static_cast<size_t>(r)]));
  return out;
}

void barrier(MPI_Comm comm, const std::string& phase) {
  PhaseGuard guard(comm, phase);
  ST_CHECK_MPI(MPI_Barrier(comm));
}

void throw_if_any_failed(const std::string& problem, MPI_Comm comm, const std::string& phase) {
  int rank = 0;
  ST_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  // The lowest failing rank, or INT_MAX when none failed: one reduction in
  // the common case, a broadcast of the message only on failure.
  const int64_t first = min_over_ranks(problem.empty() ? INT_MAX : rank, comm, phase);
  if (first == INT_MAX) return;
  const std::string message = broadcast_string(problem, comm, phase, static_cast<int>(first));
  if (first == rank) throw Error(message);
  int world_rank = -1;
  MPI_Group group = MPI_GROUP_NULL, world_group = MPI_GROUP_NULL;
  const int first_rank = static_cast<int>(first);
  ST_CHECK_MPI(MPI_Comm_group(comm, &group));
  ST_CHECK_MPI(MPI_Comm_group(MPI_COMM_WORLD, &world_group));
  ST_CHECK_MPI(MPI_Group_translate_ranks(group, 1, &first_rank, world_group, &world_rank));
  ST_CHECK_MPI(MPI_Group_free(&group));
  ST_CHECK_MPI(MPI_Group_free(&world_group));
  throw Error(message + " (on world rank " + std::to_string(world_rank) + ")");
}

namespace detail {

std::string describe_exception(const std::exception& e, const std::string& phase) {
  if (dynamic_cast<const std::bad_alloc*>(&e))
    return phase + ": out of memory on rank 0 (an allocation failed)";
  return phase + ": " + e.what();
}

void share_rank0_error(std::string error, MPI_Comm comm, const std::string& phase) {
  error = broadcast_string(error, comm, phase);
  if (!error.empty()) throw Error(error);
}

}  // namespace detail
}  // namespace shardtrain
