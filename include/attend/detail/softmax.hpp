// attend/detail/softmax.hpp — the softmax's passes on the active level, for code outside the kernels: a row's max and
// shifted exponentials, the masked softmax of a row or of a block of rows, and the softmax's backward pass on a row.
// The public masked_softmax (masked_softmax.hpp) and the drivers (detail/attend_rows.hpp) and modules
// (additive_attention.hpp) all run on these.
#pragma once

#include <algorithm>
#include <attend/config.hpp>
#include <attend/detail/kernels.hpp>
#include <attend/detail/tuning.hpp>
#include <attend/mask.hpp>
#include <attend/tensor.hpp>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

// The softmax's passes on the active level (detail/kernels/softmax-inl.hpp), for code outside the kernels.

// max_j row[j] over n >= 1 contiguous entries (all NaN or -inf may give -inf).
template <class Scalar>
Scalar row_max(const Scalar* row, Index n) {
  return kernels<Scalar>().row_max(row, n);
}

// row[j] = exp(row[j] - m) for j < n, flushed to 0 where row[j] - m < exp_underflow; returns their sum.
template <class Scalar>
Scalar exp_shifted(Scalar* row, Index n, Scalar m) {
  return kernels<Scalar>().exp_shifted(row, n, m);
}

// One row of scores, in place: every key the row does not see (keys: from Mask::visible_keys) replaced by -1e6, the
// rule for a row that sees none, then softmax. row: (num_keys), contiguous.
template <class Scalar>
void masked_softmax_row(Scalar* row, Index num_keys, const VisibleKeys& keys, FullyMasked rule = FullyMasked::uniform) {
  kernels<Scalar>().masked_softmax_row(row, num_keys, keys, rule);
}

// The softmax's backward pass on one row (detail/kernels/softmax-inl.hpp, softmax_backward_row): dx = (y (dy - s))
// scale on the keys the row sees, 0 elsewhere, s = sum y dy over them. y, dy, dx: (num_keys); dx may be dy.
template <class Scalar>
void softmax_backward_row(const Scalar* y, const Scalar* dy, Scalar* dx, Index num_keys, const VisibleKeys& keys,
                          Scalar scale = Scalar(1)) {
  kernels<Scalar>().softmax_backward_row(y, dy, dx, num_keys, keys, scale);
}

// Every row of a row-major (queries, keys) block of scores, in place; the block belongs to batch row b of the mask,
// whose shape the caller checked (Mask::require_shape).
template <class Derived>
void masked_softmax_block(Eigen::MatrixBase<Derived>& scores, const Mask& mask, Index b) {
  using Scalar = typename Derived::Scalar;
  static_assert(static_cast<int>(Derived::IsRowMajor) == 1, "scores must be row-major");
  const Index rows = scores.rows(), num_keys = scores.cols();
  if (rows == 0 || num_keys == 0) return;  // no row to point into
  const Kernels<Scalar>& kernel = kernels<Scalar>();
  // In blocks of direct_block_rows rows, each row's visible keys resolved once; the bits do not depend on the blocks.
  VisibleKeys keys[tuning::direct_block_rows];
  for (Index q0 = 0; q0 < rows; q0 += tuning::direct_block_rows) {
    const Index count = std::min(tuning::direct_block_rows, rows - q0);
    for (Index i = 0; i < count; ++i) keys[i] = mask.visible_keys(b, q0 + i, rows, num_keys);
    kernel.masked_softmax_block(&scores.derived().coeffRef(q0, 0), count, num_keys, scores.derived().outerStride(),
                                keys, mask.fully_masked(), Scalar(1));
  }
}

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
