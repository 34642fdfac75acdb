// attend/masked_softmax.hpp — softmax over the last axis after d2l's masking.
//
// masked_softmax(X, valid_lens): X (batch, queries, keys) -> weights (batch, queries, keys).
// Scores of masked keys are *replaced* by -1e6 before the softmax (d2l's sequence_mask(..., value=-1e6)),
// so a query whose valid length is 0 gets uniform weights 1/keys, exactly as the seed's code.
#pragma once

#include <attend/tensor.hpp>
#include <attend/valid_lens.hpp>
#include <type_traits>

namespace attend {
namespace detail {

// The value d2l writes over masked scores.
template <class Scalar>
constexpr Scalar masked_score() {
  return Scalar(-1e6);
}

// Below this, exp(x) is under the smallest normal number of Scalar; Eigen's vectorised exp clamps such x and
// returns a tiny positive value, where the exact result rounds to 0 or a subnormal. We return 0, so that a masked
// key's weight is exactly 0 (as in PyTorch), at an absolute cost below 1.2e-38 (float) or 2.3e-308 (double).
template <class Scalar>
constexpr Scalar exp_underflow() {
  return std::is_same<Scalar, float>::value ? Scalar(-87.33654) : Scalar(-708.3964185322641);
}

// One row of scores, in place: keys >= valid_len are replaced by -1e6, then
//   1. m = max_j row[j]          2. row[j] = exp(row[j] - m)          3. row[j] /= sum_j row[j]
// row: (num_keys), contiguous.
template <class Scalar>
void masked_softmax_row(Scalar* row, Index num_keys, Index valid_len) {
  if (num_keys == 0) return;
  Eigen::Map<Eigen::Array<Scalar, 1, Eigen::Dynamic>> r(row, num_keys);
  if (valid_len < num_keys) r.tail(num_keys - valid_len).setConstant(masked_score<Scalar>());
  const Scalar m = r.maxCoeff();
  r -= m;
  r = (r < exp_underflow<Scalar>()).select(Scalar(0), r.exp());
  r /= r.sum();
}

// Every row of a (queries, keys) block of scores, in place; the block belongs to batch row b of valid_lens.
// Lengths are checked by the caller (ValidLens::require_shape).
template <class Derived>
void masked_softmax_block(Eigen::MatrixBase<Derived>& scores, const ValidLens& valid_lens, Index b) {
  using Scalar = typename Derived::Scalar;
  static_assert(static_cast<int>(Derived::IsRowMajor) == 1, "scores must be row-major");
  const Index num_keys = scores.cols();
  for (Index q = 0; q < scores.rows(); ++q) {
    const Index valid = valid_lens.empty() ? num_keys : valid_lens.length(b, q);
    masked_softmax_row<Scalar>(&scores.derived().coeffRef(q, 0), num_keys, valid);
  }
}

}  // namespace detail

// X: (batch, queries, keys); valid_lens: none, (batch,) or (batch, queries) -> (batch, queries, keys)
template <class Scalar>
Tensor3<Scalar> masked_softmax(const Tensor3<Scalar>& X, const ValidLens& valid_lens = {}) {
  valid_lens.require_shape(X.dimension(0), X.dimension(1), "masked_softmax");
  Tensor3<Scalar> weights = X;  // (batch, queries, keys)
  for (Index b = 0; b < X.dimension(0); ++b) {
    auto block = detail::slice(weights, b);  // (queries, keys)
    detail::masked_softmax_block(block, valid_lens, b);
  }
  return weights;
}

}  // namespace attend
