// attend/detail/products.hpp — the plain matrix products the backward passes need, on the active level's row kernel
// (detail/kernels/products-inl.hpp):
//   times(A, B)             C = A B          A (m, k), B (k, n)
//   transposed_times(A, B)  C (+)= A^T B     A (k, m), B (k, n)     (A read in place)
// Every element of C is one multiply-add chain over k in order, and C goes in fixed chunks shared among the threads:
// the same bits whatever the number of threads. All matrices row-major with contiguous rows.
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

// product(r0, rows, c0, columns) for each chunk of C (m, n) in an (m, k) by (k, n) product, shared among the threads:
// tuning::rows_per_chunk rows by one panel of the row kernel's columns (tuning::product_panel_width, the split it
// makes itself, so a chunk adds no pass over B), so that a product of few rows and many columns, such as a weight
// gradient (out, in), still has work for every thread. The chunks fixed by m and n alone.
template <class Scalar, class Product>
void in_chunks(Index m, Index k, Index n, const Product& product) {
  constexpr Index width = tuning::product_panel_width<Scalar>;
  const Index row_chunks = (m + tuning::rows_per_chunk - 1) / tuning::rows_per_chunk;
  const Index column_chunks = (n + width - 1) / width;
  parallel_for(row_chunks * column_chunks, static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(n),
               [&](Index c, int) {
                 const Index r0 = c / column_chunks * tuning::rows_per_chunk, c0 = c % column_chunks * width;
                 product(r0, std::min(tuning::rows_per_chunk, m - r0), c0, std::min(width, n - c0));
               });
}

// C (m, n) = A (m, k) B (k, n), or C += A B when accumulate. Rows lda, ldb, ldc apart.
template <class Scalar>
void times(bool accumulate, const Scalar* A, Index lda, Index m, Index k, const Scalar* B, Index ldb, Index n,
           Scalar* C, Index ldc) {
  if (m == 0 || n == 0) return;
  const Kernels<Scalar>& kernel = kernels<Scalar>();  // before the parallel region: it may throw
  in_chunks<Scalar>(m, k, n, [&](Index r0, Index rows, Index c0, Index columns) {
    kernel.times_matrix(x_rows(A + r0 * lda, lda, rows), k, b_rows(B + c0, ldb), columns,
                        {C + r0 * ldc + c0, ldc, accumulate, nullptr});
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
  const Kernels<Scalar>& kernel = kernels<Scalar>();  // before the parallel region: it may throw
  in_chunks<Scalar>(C.rows(), A.rows(), C.cols(), [&](Index r0, Index rows, Index c0, Index columns) {
    // rows r0 .. of C: A^T's rows r0 .., A's columns r0 ..; columns c0 .. of C: B's columns c0 ..
    kernel.times_matrix(x_columns(A.data() + r0, A.outerStride(), rows), A.rows(),
                        b_rows(B.data() + c0, B.outerStride()), columns,
                        {C.data() + r0 * C.outerStride() + c0, C.outerStride(), accumulate, nullptr});
  });
}

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
