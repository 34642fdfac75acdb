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

// In place: keys >= prefix are replaced by -1e6; with a keep row, so are the keys j < prefix where keep[j] is false.
// Returns false when no key is left and rule is FullyMasked::zero: the row then needs no softmax (it is to be 0).
// row: (num_keys); keep: (num_keys) or null.
template <class Scalar>
bool mask_scores_row(Scalar* row, Index num_keys, Index prefix, const bool* keep, FullyMasked rule) {
  if (prefix < num_keys) std::fill(row + prefix, row + num_keys, masked_score<Scalar>());
  bool sees_a_key = prefix > 0;
  if (keep != nullptr) {
    sees_a_key = false;
    for (Index j = 0; j < std::min(prefix, num_keys); ++j) {
      if (keep[j]) {
        sees_a_key = true;
      } else {
        row[j] = masked_score<Scalar>();
      }
    }
  }
  return sees_a_key || rule != FullyMasked::zero;
}

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
