// attend/threads.hpp — how many threads attend's kernels use.
//
// attend parallelises with OpenMP when the including target is compiled with it (CMake: attend::attend links
// OpenMP::OpenMP_CXX when ATTEND_USE_OPENMP is ON, the default, and OpenMP is found). Without OpenMP everything
// runs on the calling thread and set_num_threads() only records the number.
//
// Work is split into pieces that do not depend on the number of threads (chunks of rows, (batch row, head, query
// block) items), each piece computed by one thread in a fixed order, so results are bit-identical for 1 and N
// threads. Eigen's own GEMM threading, whose blocking changes with the thread count, is never relied on: every
// product attend's kernels run is the row kernel's, inside one of these pieces.
#pragma once

#include <attend/config.hpp>

#include <attend/detail/tuning.hpp>
#include <attend/tensor.hpp>

#include <Eigen/Core>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace attend {
inline namespace ATTEND_ABI {

// Threads used by attend's kernels (and by Eigen's, which share OpenMP's setting): at least 1.
// Sets OpenMP's default team size for the calling thread (omp_set_num_threads) and Eigen::setNbThreads.
inline void set_num_threads(int threads) {
  detail::require(threads >= 1, "set_num_threads: threads must be at least 1, got ", threads);
#ifdef _OPENMP
  omp_set_num_threads(threads);
#endif
  Eigen::setNbThreads(threads);
}

// The number of threads the next call will use: OpenMP's team size, or 1 without OpenMP.
inline int num_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// True when attend was compiled with OpenMP.
constexpr bool has_openmp() {
#ifdef _OPENMP
  return true;
#else
  return false;
#endif
}

namespace detail {

// Runs body(i, thread) for i in [0, count), shared among num_threads() threads when OpenMP is on, we are not
// already inside a parallel region, there are at least two pieces, and all of them together are worth a team (at
// least tuning::worth_a_team multiply-adds); otherwise serially, with thread 0. (A team for one piece, or for little
// work, mostly waits for its threads, which on a busy machine can take a scheduler time slice.) thread, in
// [0, num_threads()), says whose scratch to use; total_work: the multiply-adds of all pieces together. Every piece is
// computed by one thread whatever their number, so the result does not depend on the thread count. body must not
// throw (it runs inside a parallel region): allocate before.
template <class Body>
void parallel_for(Index count, double total_work, Body&& body) {
#ifdef _OPENMP
  const bool team = count > 1 && total_work >= tuning::worth_a_team;
  if (count > 0 && team && omp_get_max_threads() > 1 && !omp_in_parallel()) {
#pragma omp parallel for schedule(dynamic, 1)
    for (Index i = 0; i < count; ++i) body(i, omp_get_thread_num());
    return;
  }
#else
  static_cast<void>(total_work);
#endif
  for (Index i = 0; i < count; ++i) body(i, 0);
}

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
