// attend/detail/mask_row.hpp — d2l's masking of one row of scores, as the direct path applies it.
#pragma once

#include <attend/config.hpp>
#include <attend/detail/generic/simd.hpp>
#include <attend/mask.hpp>
#include <attend/tensor.hpp>

#include <algorithm>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

// In place: every key the row does not see (outside keys' range, and the keep row's holes inside it) is replaced by
// -1e6. Returns false when the row sees no key and rule is FullyMasked::zero: the row then needs no softmax (it is to
// be 0). row: (num_keys); keys: from Mask::visible_keys, its range within [0, num_keys].
template <class Scalar>
bool mask_scores_row(Scalar* row, Index num_keys, const VisibleKeys& keys, FullyMasked rule) {
  const Index first = std::min(keys.first, num_keys), last = std::min(keys.last, num_keys);
  std::fill(row, row + first, masked_score<Scalar>());
  std::fill(row + std::max(first, last), row + num_keys, masked_score<Scalar>());
  if (!keys.is_range())
    for (Index j = first; j < last; ++j)
      if (!keys.keep[j]) row[j] = masked_score<Scalar>();
  return !keys.none() || rule != FullyMasked::zero;
}

// The softmax's backward pass on one row, the rule masked_softmax_backward and both attention paths' backward
// passes follow: with s = sum_k y_k dy_k over the keys the row sees, dx_j = y_j (dy_j - s) for a key j it sees and 0
// for one it does not (its score was replaced before the softmax, so nothing depends on it); a row that sees no key
// gets a zero row, whatever its FullyMasked rule. In a row that sees a key, a masked key's weight y_k is 0, so s is
// the sum over every key, and a masked key's dy (0 * NaN, for one) never enters it. y, dy, dx: (num_keys); dx may be
// dy.
template <class Scalar>
void softmax_backward_row(const Scalar* y, const Scalar* dy, Scalar* dx, Index num_keys, const VisibleKeys& keys) {
  Scalar s = Scalar(0);
  keys.for_each(0, num_keys, [&](Index k) { s += y[k] * dy[k]; });
  Index next = 0;  // keys below it are written
  keys.for_each(0, num_keys, [&](Index j) {
    std::fill(dx + next, dx + j, Scalar(0));
    dx[j] = y[j] * (dy[j] - s);
    next = j + 1;
  });
  std::fill(dx + next, dx + num_keys, Scalar(0));
}

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
