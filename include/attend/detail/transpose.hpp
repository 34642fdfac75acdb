// attend/detail/transpose.hpp — B = A^T between row-major buffers, on the active level.
//
// Eigen's assignment of a transposed block (dst = src.transpose()) moves one scalar at a time; the kernel
// (detail/kernels/products-inl.hpp, transpose_into) moves tiles of 4 x 4 to 16 x 16 through registers.
#pragma once

#include <attend/config.hpp>
#include <attend/detail/kernels.hpp>
#include <attend/tensor.hpp>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

// B (cols, rows) = A (rows, cols)^T. A's rows lda apart, B's ldb apart; the two may not overlap. Exact (a copy).
template <class Scalar>
void transpose_into(const Scalar* A, Index lda, Index rows, Index cols, Scalar* B, Index ldb) {
  kernels<Scalar>().transpose_into(A, lda, rows, cols, B, ldb);
}

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
