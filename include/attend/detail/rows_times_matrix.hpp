// attend/detail/rows_times_matrix.hpp — Y = X B (+ bias), or Y += X B, on the row kernel of the active level; and
// Y (+)= A^T B with A read in place, and Y (+)= X B with B read in place in any layout.
//
// The kernel itself is detail/kernels/products-inl.hpp; these are its entry points for code outside the kernels,
// each a call through the table of detail/kernels.hpp. Inside a parallel region, fetch the table before it
// (kernels<Scalar>()) and call through that.
#pragma once

#include <attend/config.hpp>
#include <attend/detail/kernels.hpp>
#include <attend/detail/tuning.hpp>
#include <attend/tensor.hpp>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

// Y (rows, out) = X (rows, in) B (in, out) + bias, or Y += X B + bias when Accumulate. X rows ldx apart, B rows ldb
// apart, Y rows ldy apart; bias (out) or null. With in = 0, Y = bias (0 without one), or Y += bias when
// accumulating: X and B are then never read, and either may be null.
// padded: B's rows may be read in whole packets, out rounded up to padded_to_packets<Scalar>(out) (a padded copy, or
// out a multiple of that); false: B's rows end at `out`. Every element of Y is one chain of multiply-adds over k in
// order: the same bits whatever the number of rows in a call, so whatever the number of threads.
template <bool Accumulate, class Scalar>
void rows_times_matrix(const Scalar* X, Index ldx, Index rows, Index in, const Scalar* B, Index ldb, Index out,
                       bool padded, const Scalar* bias, Scalar* Y, Index ldy) {
  kernels<Scalar>().rows_times_matrix(Accumulate, X, ldx, rows, in, B, ldb, out, padded, bias, Y, ldy);
}

// Y (rows, out) = A^T B + bias, or Y += A^T B + bias when Accumulate, with A (in, rows) read in place, rows lda
// apart; B's rows (ldb apart) end at `out`. The bits of rows_times_matrix on a copy of A^T; with in = 0, as it.
template <bool Accumulate, class Scalar>
void transposed_times_matrix(const Scalar* A, Index lda, Index rows, Index in, const Scalar* B, Index ldb, Index out,
                             const Scalar* bias, Scalar* Y, Index ldy) {
  kernels<Scalar>().transposed_times_matrix(Accumulate, A, lda, rows, in, B, ldb, out, bias, Y, ldy);
}

// A matrix read in place in any layout: its entry (k, o) at data[k * row_stride + o * column_stride].
template <class Scalar>
struct StridedMatrix {
  const Scalar* data;
  Index row_stride;
  Index column_stride;
};

// Y (rows, out) = X B + bias, or Y += X B + bias when Accumulate, with B (in, out) a StridedMatrix: no copy of B is
// made but the packed panels of the row kernel. The bits of rows_times_matrix on a row-major copy of B; with in = 0,
// as it.
template <bool Accumulate, class Scalar>
void strided_times_matrix(const Scalar* X, Index ldx, Index rows, Index in, const StridedMatrix<Scalar>& B, Index out,
                          const Scalar* bias, Scalar* Y, Index ldy) {
  kernels<Scalar>().strided_times_matrix(Accumulate, X, ldx, rows, in, B.data, B.row_stride, B.column_stride, out,
                                         bias, Y, ldy);
}

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
