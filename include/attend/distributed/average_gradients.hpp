// attend/distributed/average_gradients.hpp — data-parallel training over MPI.
//
//   average_gradients(comm, params)   every parameter's gradient replaced by its mean over the ranks of comm
//
// Data-parallel training: each rank runs forward and backward on its share of the batch, then average_gradients, then
// the same optimizer step, so the ranks' parameters stay equal. The call is collective: every rank of comm calls it
// with the same parameters (count, sizes, order). Before any gradient moves, one allreduce compares what the ranks
// hold (each rank's checks of its own parameters: sizes, pointers, still_valid; then the number of parameters and the
// sum of their sizes weighted by position): on a mismatch every rank throws std::invalid_argument, the gradients
// unchanged, so none is left waiting for the others. The gradients then travel in buckets of
// tuning::gradient_bucket_bytes, copied into one contiguous buffer: one MPI_Allreduce per bucket, not per parameter.
// Each element's mean is its sum over the ranks, in MPI's order, divided by the number of ranks.
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

}  // namespace detail

template <class Scalar>
void average_gradients(MPI_Comm comm, const std::vector<Parameter<Scalar>>& params) {
  static_assert(std::is_same<Scalar, float>::value || std::is_same<Scalar, double>::value,
                "attend: average_gradients takes float or double parameters (bfloat16 modules keep no gradients)");
  constexpr const char* where = "average_gradients";
  int rank = 0, ranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);

  // What every rank must agree on, reduced by MIN: the first rank with a problem (ranks when none), then the count
  // and the weighted size with and without their sign, so that one allreduce gives each one's least and largest.
  const std::string problem = detail::parameters_problem(params);
  long long count = static_cast<long long>(params.size()), weighted = 0, total = 0;
  if (problem.empty())
    for (std::size_t i = 0; i < params.size(); ++i) {
      weighted += static_cast<long long>(params[i].size) * static_cast<long long>(i + 1);
      total += params[i].size;
    }
  const long long mine[5] = {problem.empty() ? ranks : rank, count, -count, weighted, -weighted};
  long long least[5];
  MPI_Allreduce(mine, least, 5, MPI_LONG_LONG, MPI_MIN, comm);
  if (!problem.empty()) detail::require(false, where, ": rank ", rank, ": ", problem);
  detail::require(least[0] == ranks, where, ": rank ", least[0], "'s parameters are not usable (it says why)");
  detail::require(least[1] == -least[2], where, ": the ranks hold different numbers of parameters, from ", least[1],
                  " to ", -least[2], " (this rank: ", count, ")");
  detail::require(least[3] == -least[4], where,
                  ": the ranks' parameters differ in size or order (every rank must pass the same parameters)");
  if (ranks == 1 || total == 0) return;

  // Buckets: the gradients seen as one concatenated vector, cut into pieces of `bucket` elements.
  const long long bucket = std::max<long long>(1, detail::tuning::gradient_bucket_bytes / sizeof(Scalar));
  std::vector<Scalar> buffer(static_cast<std::size_t>(std::min(bucket, total)));  // one bucket
  // Calls visit(grad, buffer) for every piece of a parameter's gradient in [begin, end) of the concatenation, with
  // the place of that piece in the bucket that starts at begin.
  const auto each_piece = [&](long long begin, long long end, auto&& visit) {
    long long offset = 0;  // of parameter i in the concatenation
    for (const Parameter<Scalar>& p : params) {
      const long long from = std::max(begin, offset), to = std::min(end, offset + p.size);
      if (from < to) visit(p.grad + (from - offset), buffer.data() + (from - begin), to - from);
      offset += p.size;
      if (offset >= end) break;
    }
  };
  const Scalar divisor = static_cast<Scalar>(ranks);
  for (long long begin = 0; begin < total; begin += bucket) {
    const long long end = std::min(total, begin + bucket);
    each_piece(begin, end, [](const Scalar* grad, Scalar* into, long long n) { std::copy(grad, grad + n, into); });
    MPI_Allreduce(MPI_IN_PLACE, buffer.data(), static_cast<int>(end - begin), detail::mpi_type<Scalar>(), MPI_SUM,
                  comm);
    each_piece(begin, end, [&](Scalar* grad, const Scalar* from, long long n) {
      for (long long k = 0; k < n; ++k) grad[k] = from[k] / divisor;
    });
  }
}

}  // namespace ATTEND_ABI
}  // namespace attend
