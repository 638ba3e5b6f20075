// Small blocking collectives on a raw MPI_Comm, for start-up, bookkeeping and
// I/O code (not the training hot path, which goes through a Communicator):
// every MPI call is checked (ST_CHECK_MPI) and runs under a PhaseGuard
// (comm/watchdog.h) named by `phase`, so a rank that never comes ends the job
// with a message instead of a hang.
//
//   // Rank 0 alone touches the file system; every rank throws its Error alike.
//   on_rank0(comm, "creating the run folder", [&] { create_run_folder(dir); });
//
//   // Rank 0 computes, every rank receives the value (or rank 0's Error).
//   std::string resume = rank0_value(comm, "finding the newest checkpoint", [&] { return latest(dir); });
//
//   // Every rank reports its own problem; all throw the first one.
//   throw_if_any_failed(problem, comm, "checkpoint write: opening the file");
//
// Exceptions in on_rank0 / rank0_value: a shardtrain::Error on rank 0 is
// rethrown, same text, on every rank (so run_cli reports it once, exit 2).
// Any other exception there (std::bad_alloc, a library error) also reaches
// every rank, as an Error "<phase>: <what>" ("out of memory" for bad_alloc),
// so that no rank is left waiting in the broadcast.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardtrain/comm/watchdog.h"
#include "shardtrain/core/check.h"

namespace shardtrain {

// Every rank returns root's `text`.
std::string broadcast_string(const std::string& text, MPI_Comm comm, const std::string& phase, int root = 0);

// Every rank returns root's bytes of `value` (trivially copyable).
template <class T>
T broadcast_value(T value, MPI_Comm comm, const std::string& phase, int root = 0) {
  static_assert(std::is_trivially_copyable<T>::value, "broadcast_value needs a trivially copyable type");
  PhaseGuard guard(comm, phase);
  ST_CHECK_MPI(MPI_Bcast(&value, static_cast<int>(sizeof(T)), MPI_BYTE, root, comm));
  return value;
}

// MPI_Allreduce in place over `count` elements of `type` at `data`.
void all_reduce_in_place(void* data, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm, const std::string& phase);

// Reductions of one value over all ranks.
int64_t max_over_ranks(int64_t value, MPI_Comm comm, const std::string& phase);
int64_t min_over_ranks(int64_t value, MPI_Comm comm, const std::string& phase);
double max_over_ranks(double value, MPI_Comm comm, const std::string& phase);
double sum_over_ranks(double value, MPI_Comm comm, const std::string& phase);

// Every rank's `mine`, in rank order.
std::vector<std::string> all_gather_strings(const std::string& mine, MPI_Comm comm, const std::string& phase);

void barrier(MPI_Comm comm, const std::string& phase);

// Each rank passes its own problem ("" when it has none). When any rank has
// one, every rank throws Error with the problem of the lowest such rank (with
// " (on world rank r)" appended when that is not this rank's own).
void throw_if_any_failed(const std::string& problem, MPI_Comm comm, const std::string& phase);

namespace detail {
// The text rank 0 broadcasts for an exception caught while running `phase`.
std::string describe_exception(const std::exception& e, const std::string& phase);
// Broadcasts rank 0's error text ("" = none) under `phase`; throws Error on
// every rank when it is not empty.
void share_rank0_error(std::string error, MPI_Comm comm, const std::string& phase);
}  // namespace detail

// Runs `body` on rank 0 only; every rank returns once it is done, or throws
// the Error it threw. The other ranks wait under `phase`; rank 0 joins the
// phase after `body`, so a rank 0 stuck in `body` is named as not arrived.
template <class F>
void on_rank0(MPI_Comm comm, const std::string& phase, F&& body) {
  int rank = 0;
  ST_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  std::string error;
  if (rank == 0) {
    try {
      body();
    } catch (const Error& e) {
      error = *e.what() ? e.what() : "error";
    } catch (const std::exception& e) {
      error = detail::describe_exception(e, phase);
    }
  }
  detail::share_rank0_error(std::move(error), comm, phase);
}

// Runs `body` on rank 0 and returns its value on every rank (std::string or a
// trivially copyable type), or throws rank 0's Error on every rank.
template <class F>
auto rank0_value(MPI_Comm comm, const std::string& phase, F&& body) -> std::decay_t<decltype(body())> {
  using T = std::decay_t<decltype(body())>;
  int rank = 0;
  ST_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  T value{};
  on_rank0(comm, phase, [&] { value = body(); });
  if constexpr (std::is_same<T, std::string>::value) {
    return broadcast_string(value, comm, phase);
  } else {
    return broadcast_value(value, comm, phase);
  }
}

}  // namespace shardtrain
