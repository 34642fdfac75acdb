// attend/distributed/average_gradients.hpp — data-parallel training over MPI.
//
//   broadcast_parameters(comm, params, root)   every parameter's value replaced by root's: one starting model
//   average_gradients(comm, params)            every parameter's gradient replaced by its mean over the ranks of comm
//
// Data-parallel training: each rank runs forward and backward on its share of the batch, then average_gradients, then
// the same optimizer step, so the ranks' parameters stay equal. The call is collective: every rank of comm calls it
// with the same parameters (count, sizes, order). Before any gradient moves, one allreduce compares what the ranks
// hold (each rank's checks of its own parameters: sizes, pointers, still_valid; then the number of parameters and the
// sum of their sizes weighted by position): on a mismatch every rank throws std::invalid_argument, the gradients
// unchanged, so none is left waiting for the others. The gradients then travel in buckets of
// tuning::gradient_bucket_bytes, copied into one contiguous buffer: one MPI_Allreduce per bucket, not per parameter.
// Each element's mean is its sum over the ranks, in MPI's order, divided by the number of ranks. broadcast_parameters
// checks and moves the values the same way, by MPI_Bcast.
#pragma once

#include <attend/config.hpp>
#include <attend/detail/tuning.hpp>
#include <attend/distributed/collective.hpp>
#include <attend/parameter.hpp>
#include <attend/state_dict.hpp>
#include <attend/tensor.hpp>
#include <mpi.h>

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

// The first problem of this rank's parameters (parameter_problem, then still_valid), or "" when there is none.
template <class Scalar>
std::string parameters_problem(const std::vector<Parameter<Scalar>>& params) {
  for (const Parameter<Scalar>& p : params) {
    const std::string problem = parameter_problem(p);
    if (!problem.empty()) return problem;
    if (p.still_valid && !p.still_valid())
      return message("parameter ", quoted(p.name), " is no longer its module's storage");
  }
  return "";
}

// Collective: throws std::invalid_argument on every rank unless every rank's parameters are usable and alike in
// number, sizes and order. Returns the sum of their sizes.
template <class Scalar>
long long require_parameters_match(MPI_Comm comm, const std::vector<Parameter<Scalar>>& params, const char* where) {
  const int rank = comm_rank(comm), ranks = comm_size(comm);
  // What every rank must agree on, reduced by MIN: the first rank with a problem (ranks when none), then the count
  // and the weighted size with and without their sign, so that one allreduce gives each one's least and largest.
  const std::string problem = parameters_problem(params);
  long long count = static_cast<long long>(params.size()), weighted = 0, total = 0;
  if (problem.empty())
    for (std::size_t i = 0; i < params.size(); ++i) {
      weighted += static_cast<long long>(params[i].size) * static_cast<long long>(i + 1);
      total += params[i].size;
    }
  const long long mine[5] = {problem.empty() ? ranks : rank, count, -count, weighted, -weighted};
  long long least[5];
  MPI_Allreduce(mine, least, 5, MPI_LONG_LONG, MPI_MIN, comm);
  if (!problem.empty()) require(false, where, ": rank ", rank, ": ", problem);
  require(least[0] == ranks, where, ": rank ", least[0], "'s parameters are not usable (it says why)");
  require(least[1] == -least[2], where, ": the ranks hold different numbers of parameters, from ", least[1], " to ",
          -least[2], " (this rank: ", count, ")");
  require(least[3] == -least[4], where,
          ": the ranks' parameters differ in size or order (every rank must pass the same parameters)");
  return total;
}

// The parameters' arrays chosen by `array` (value or grad), seen as one concatenated vector of `total` elements and
// cut into buckets of tuning::gradient_bucket_bytes: for each bucket, its elements copied into one buffer, then
// move(buffer, count), then the buffer's elements given back through `back` (element -> new value).
template <class Scalar, class Array, class Move, class Back>
void each_bucket(const std::vector<Parameter<Scalar>>& params, long long total, Array array, Move move, Back back) {
  const long long bucket = std::max<long long>(1, tuning::gradient_bucket_bytes / sizeof(Scalar));
  std::vector<Scalar> buffer(static_cast<std::size_t>(std::min(bucket, total)));
  // Calls visit(piece of a parameter's array, its place in the buffer, length) for the pieces in [begin, end).
  const auto each_piece = [&](long long begin, long long end, auto&& visit) {
    long long offset = 0;  // of parameter i in the concatenation
    for (const Parameter<Scalar>& p : params) {
      const long long from = std::max(begin, offset), to = std::min(end, offset + p.size);
      if (from < to) visit(array(p) + (from - offset), buffer.data() + (from - begin), to - from);
      offset += p.size;
      if (offset >= end) break;
    }
  };
  for (long long begin = 0; begin < total; begin += bucket) {
    const long long end = std::min(total, begin + bucket);
    each_piece(begin, end, [](const Scalar* x, Scalar* into, long long n) { std::copy(x, x + n, into); });
    move(buffer.data(), static_cast<int>(end - begin));
    each_piece(begin, end, [&](Scalar* x, const Scalar* from, long long n) {
      for (long long k = 0; k < n; ++k) x[k] = back(from[k]);
    });
  }
}

}  // namespace detail

template <class Scalar>
void average_gradients(MPI_Comm comm, const std::vector<Parameter<Scalar>>& params) {
  static_assert(std::is_same<Scalar, float>::value || std::is_same<Scalar, double>::value,
                "attend: average_gradients takes float or double parameters (bfloat16 modules keep no gradients)");
  const long long total = detail::require_parameters_match(comm, params, "average_gradients");
  const int ranks = detail::comm_size(comm);
  if (ranks == 1 || total == 0) return;
  const Scalar divisor = static_cast<Scalar>(ranks);
  detail::each_bucket(
      params, total, [](const Parameter<Scalar>& p) { return p.grad; },
      [&](Scalar* buffer, int count) {
        MPI_Allreduce(MPI_IN_PLACE, buffer, count, detail::mpi_type<Scalar>(), MPI_SUM, comm);
      },
      [&](Scalar sum) { return sum / divisor; });
}

// Every parameter's value replaced by root's, so that the ranks start from one model whatever each initialised.
template <class Scalar>
void broadcast_parameters(MPI_Comm comm, const std::vector<Parameter<Scalar>>& params, int root = 0) {
  static_assert(std::is_same<Scalar, float>::value || std::is_same<Scalar, double>::value,
                "attend: broadcast_parameters takes float or double parameters");
  constexpr const char* where = "broadcast_parameters";
  const int ranks = detail::comm_size(comm);
  detail::require(root >= 0 && root < ranks, where, ": root must be a rank of comm, in [0, ", ranks, "), got ", root);
  const long long total = detail::require_parameters_match(comm, params, where);
  if (ranks == 1 || total == 0) return;
  detail::each_bucket(
      params, total, [](const Parameter<Scalar>& p) { return p.value; },
      [&](Scalar* buffer, int count) { MPI_Bcast(buffer, count, detail::mpi_type<Scalar>(), root, comm); },
      [](Scalar x) { return x; });
}

}  // namespace ATTEND_ABI
}  // namespace attend
