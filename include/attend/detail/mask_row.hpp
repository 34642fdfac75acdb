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

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
