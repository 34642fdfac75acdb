// attend/distributed/collective.hpp — what the calls of attend/distributed/ share: MPI's name for a Scalar, and the
// checks that make every rank of a collective call throw together instead of leaving the others waiting.
//
//   require_everywhere(comm, problem, where)   a rank's problem ("" for none) becomes every rank's exception
//   require_same(comm, fields, where)          named integers every rank must agree on, compared across the ranks
//   run_or_abort(comm, body)                   (public) body(), or on an exception its message and MPI_Abort
#pragma once

#include <attend/config.hpp>
#include <attend/tensor.hpp>
#include <mpi.h>

#include <cstdio>
#include <exception>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

template <class Scalar>
MPI_Datatype mpi_type() {
  return std::is_same<Scalar, float>::value ? MPI_FLOAT : MPI_DOUBLE;
}

inline int comm_rank(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return rank;
}
inline int comm_size(MPI_Comm comm) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  return size;
}

// Collective: when some rank's problem is not empty, every rank throws std::invalid_argument with the message of the
// lowest such rank, followed by " (rank r)".
inline void require_everywhere(MPI_Comm comm, const std::string& problem, const char* where) {
  const int rank = comm_rank(comm), ranks = comm_size(comm);
  const int mine = problem.empty() ? ranks : rank;
  int first = ranks;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
  if (first == ranks) return;
  int length = static_cast<int>(problem.size());
  MPI_Bcast(&length, 1, MPI_INT, first, comm);
  std::string text = rank == first ? problem : std::string(static_cast<std::size_t>(length), ' ');
  MPI_Bcast(text.data(), length, MPI_CHAR, first, comm);
  require(false, text.empty() ? std::string(where) : text, " (rank ", first, ")");
}

// Named values every rank must hold alike.
using Fields = std::vector<std::pair<const char*, long long>>;

// Collective: every rank's fields (the same names in the same order on each) gathered; where a rank's value differs
// from rank 0's, every rank throws std::invalid_argument naming the first such field and both values.
inline void require_same(MPI_Comm comm, const Fields& fields, const char* where) {
  const int ranks = comm_size(comm);
  const int n = static_cast<int>(fields.size());
  std::vector<long long> mine(fields.size()), all(fields.size() * static_cast<std::size_t>(ranks));
  for (std::size_t i = 0; i < fields.size(); ++i) mine[i] = fields[i].second;
  MPI_Allgather(mine.data(), n, MPI_LONG_LONG, all.data(), n, MPI_LONG_LONG, comm);
  for (int r = 1; r < ranks; ++r)
    for (int i = 0; i < n; ++i) {
      const long long first = all[static_cast<std::size_t>(i)], other = all[static_cast<std::size_t>(r * n + i)];
      require(first == other, where, ": ", fields[static_cast<std::size_t>(i)].first,
              " must be the same on every rank; rank 0 has ", first, ", rank ", r, " has ", other);
    }
}

}  // namespace detail

// Runs body(). When it throws, prints "rank r: <what()>" to standard error and calls MPI_Abort(comm, 1), which ends
// every process of comm: a rank that fails outside a collective check would otherwise leave the others waiting for a
// message it will never send. Wrap a distributed program's work in it (examples/train_distributed.cpp).
template <class Body>
void run_or_abort(MPI_Comm comm, Body&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", detail::comm_rank(comm), e.what());
    std::fflush(stderr);
    MPI_Abort(comm, 1);
  } catch (...) {
    std::fprintf(stderr, "rank %d: an exception not derived from std::exception\n", detail::comm_rank(comm));
    std::fflush(stderr);
    MPI_Abort(comm, 1);
  }
}

}  // namespace ATTEND_ABI
}  // namespace attend
