// attend/detail/mask_row.hpp — d2l's masking of one row of scores, as the direct path applies it, and the keys a
// block of rows sees together, which the direct path's products are cut to.
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
  const auto [first, last] = keys.within(0, num_keys);
  std::fill(row, row + first, masked_score<Scalar>());
  std::fill(row + last, row + num_keys, masked_score<Scalar>());
  if (!keys.is_range())
    for (Index j = first; j < last; ++j)
      if (!keys.keep[j]) row[j] = masked_score<Scalar>();
  return !keys.none() || rule != FullyMasked::zero;
}

// The keys a block of query rows sees together: [first, last), the union of the rows' visible ranges ([0, 0) when
// none sees a key, so that first <= last always and first is an offset into any block, an empty one included); and
// whether some row sees none under FullyMasked::uniform, whose weights 1 / num_keys reach every key. A product over a
// block's keys can be cut to these: a key outside them has weight 0 (its score replaced before the softmax) and a
// softmax gradient of 0 in every row of the block, so its terms add nothing.
struct BlockKeys {
  Index first, last;
  bool uniform_row;
  // The keys the rows' weights reach: [first, last), or every key with a uniform row.
  Index weighted_first() const { return uniform_row ? 0 : first; }
  Index weighted_last(Index num_keys) const { return uniform_row ? num_keys : last; }
};

// visible(i): the VisibleKeys of row i of the block, i in [0, rows).
template <class Visible>
BlockKeys block_keys(Index rows, Index num_keys, FullyMasked rule, Visible&& visible) {
  BlockKeys block{num_keys, 0, false};
  for (Index i = 0; i < rows; ++i) {
    const VisibleKeys keys = visible(i);
    if (keys.none()) {
      block.uniform_row = block.uniform_row || rule == FullyMasked::uniform;
    } else {
      const auto [lo, hi] = keys.within(0, num_keys);
      block.first = std::min(block.first, lo);
      block.last = std::max(block.last, hi);
    }
  }
  if (block.first >= block.last) block.first = block.last = 0;
  return block;
}

// Rows q0 .. q0 + rows - 1 of batch row b of the mask.
inline BlockKeys block_keys(const Mask& mask, Index b, Index q0, Index rows, Index num_queries, Index num_keys) {
  if (mask.empty()) return {0, rows > 0 ? num_keys : Index(0), false};
  return block_keys(rows, num_keys, mask.fully_masked(),
                    [&](Index i) { return mask.visible_keys(b, q0 + i, num_queries, num_keys); });
}

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
