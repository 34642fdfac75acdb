// attend/detail/products.hpp — the plain matrix products the backward passes need, on the active level's row kernel
// (detail/kernels/products-inl.hpp):
//   times(A, B)             C = A B          A (m, k), B (k, n)
//   transposed_times(A, B)  C (+)= A^T B     A (k, m), B (k, n)     (A read in place)
// Every element of C is one multiply-add chain over k in order, and rows of C go in fixed chunks shared among the
// threads: the same bits whatever the number of threads. All matrices row-major with contiguous rows.
#pragma once

#include <attend/config.hpp>
#include <attend/detail/kernels.hpp>
#include <attend/detail/tuning.hpp>
#include <attend/tensor.hpp>
#include <attend/threads.hpp>

#include <algorithm>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

// C (m, n) = A (m, k) B (k, n), or C += A B when accumulate. Rows lda, ldb, ldc apart.
template <class Scalar>
void times(bool accumulate, const Scalar* A, Index lda, Index m, Index k, const Scalar* B, Index ldb, Index n,
           Scalar* C, Index ldc) {
  if (m == 0 || n == 0) return;
  const Kernels<Scalar>& kernel = kernels<Scalar>();  // before the parallel region: it may throw
  const Index chunks = (m + tuning::rows_per_chunk - 1) / tuning::rows_per_chunk;
  parallel_for(chunks, static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(n), [&](Index c, int) {
    const Index r0 = c * tuning::rows_per_chunk, rows = std::min(tuning::rows_per_chunk, m - r0);
    kernel.rows_times_matrix(accumulate, A + r0 * lda, lda, rows, k, B, ldb, n, false, nullptr, C + r0 * ldc, ldc);
  });
}

// C (m, n) = A^T B, or C += A^T B when accumulate: A (k, m), B (k, n), C (m, n).
template <class Scalar>
void transposed_times(bool accumulate, const Eigen::Ref<const Matrix<Scalar>>& A,
                      const Eigen::Ref<const Matrix<Scalar>>& B, Eigen::Ref<Matrix<Scalar>> C) {
  eigen_assert(A.rows() == B.rows() && C.rows() == A.cols() && C.cols() == B.cols());
  if (C.size() == 0) return;
  if (A.rows() == 0) {  // a sum over nothing
    if (!accumulate) C.setZero();
    return;
  }
  const Index m = C.rows(), k = A.rows(), n = C.cols();
  const Kernels<Scalar>& kernel = kernels<Scalar>();  // before the parallel region: it may throw
  const Index chunks = (m + tuning::rows_per_chunk - 1) / tuning::rows_per_chunk;
  parallel_for(chunks, static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(n), [&](Index c, int) {
    const Index r0 = c * tuning::rows_per_chunk, rows = std::min(tuning::rows_per_chunk, m - r0);
    // rows r0 .. of C: A^T's rows r0 .., A's columns r0 ..
    kernel.transposed_times_matrix(accumulate, A.data() + r0, A.outerStride(), rows, k, B.data(), B.outerStride(), n,
                                   nullptr, C.data() + r0 * C.outerStride(), C.outerStride());
  });
}

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
