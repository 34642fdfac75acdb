// attend/detail/project_rows.hpp — Y = X W^T + b on rows, as the attention modules' projections need it.
//
// Eigen's GEMM over fixed chunks of rows_per_chunk rows. The chunks do not depend on the number of threads, so
// neither does any output element's summation order: with OpenMP the chunks are shared among the threads, and the
// result is bit-identical for 1 and N threads. When the same X feeds several projections (Q, K and V of
// self-attention), each chunk of X is used by all of them while it is in cache: one pass over X.
#pragma once

#include <attend/tensor.hpp>
#include <attend/threads.hpp>

#include <algorithm>
#include <initializer_list>

namespace attend {
namespace detail {

// The chunk of rows: large enough that Eigen's packing of W is a small part of each chunk's work.
constexpr Index rows_per_chunk = 256;

// One projection of a batch of rows: X (rows, in) -> Y (rows, out) = X W^T + b.
template <class Scalar>
struct Projection {
  const Matrix<Scalar>* W;  // (out, in)
  const Scalar* bias;       // (out), or null
  Scalar* Y;                // (rows, out), contiguous, row-major
};

// Every projection of `projections` applied to the same X (rows, in); see the top of this file. Shapes must have
// been checked by the caller.
template <class Scalar>
void project_rows(const Eigen::Ref<const Matrix<Scalar>>& X, std::initializer_list<Projection<Scalar>> projections) {
  const Index rows = X.rows();
  if (rows == 0) return;
  const Index chunks = (rows + rows_per_chunk - 1) / rows_per_chunk;
  parallel_for(chunks, [&](Index c, int) {
    const Index r0 = c * rows_per_chunk, n = std::min(rows_per_chunk, rows - r0);
    const auto Xc = X.middleRows(r0, n);  // (n, in)
    for (const Projection<Scalar>& p : projections) {
      const Index out = p.W->rows();
      Eigen::Map<Matrix<Scalar>> Yc(p.Y + r0 * out, n, out);  // (n, out)
      Yc.noalias() = Xc * p.W->transpose();
      if (p.bias != nullptr)
        Yc.rowwise() += Eigen::Map<const Eigen::Matrix<Scalar, 1, Eigen::Dynamic>>(p.bias, out);
    }
  });
}

}  // namespace detail
}  // namespace attend
