// attend/detail/core/score_rule.hpp — ScoreOptions and the mask as the core applies them to a tile of scores.
//
// One rule for every path: a tile's row holds the scores of keys [k0, k0 + n) for query q of head h in batch row b.
// Keys the mask hides (outside the row's visible range, or a hole of its keep row) become -inf; the others become
//   x = scale * q.k;  x = softcap * tanh(x / softcap);  x -= slope_h * |p - j|;  x += bias(r, q, j)
// in the order of attend/score_options.hpp, with p = q + query_offset the query's aligned position (query_offset is
// num_keys - num_queries for a whole call; a block of a longer sequence, as ring attention runs, sets its own). A
// score of -inf (from the bias) is a hidden key like a masked one: its weight is exactly 0 (every level's exp gives
// 0 below its underflow threshold, -inf included).
#pragma once

#include <algorithm>
#include <attend/config.hpp>
#include <attend/mask.hpp>
#include <attend/score_options.hpp>
#include <attend/tensor.hpp>
#include <cmath>
#include <limits>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {
namespace core {

template <class Scalar>
struct ScoreRule {
  Scalar scale = Scalar(1);        // the resolved scale (never 0)
  Scalar softcap = Scalar(0);      // > 0: applied
  const Scalar* slopes = nullptr;  // (num_heads) or null
  const Scalar* bias = nullptr;    // (bias_rows, num_queries, num_keys) or null
  Index bias_rows = 0;             // batch * num_heads (row b * num_heads + h), batch (row b) or 1
  Index batch = 0, num_heads = 0, num_queries = 0, num_keys = 0;
  Index query_offset = 0;          // ALiBi's position of query q is q + query_offset, in the keys' numbering

  bool has_softcap() const { return softcap > Scalar(0); }
  // No option but the scale: the scores' rule is the scale and the mask alone.
  bool scale_only() const { return !has_softcap() && slopes == nullptr && bias == nullptr; }

  // The row of the bias that query q of head h in batch row b adds, (num_keys); null without a bias.
  const Scalar* bias_row(Index b, Index h, Index q) const {
    if (bias == nullptr) return nullptr;
    const Index r = bias_rows == batch * num_heads ? b * num_heads + h : bias_rows == batch ? b : 0;
    return bias + (r * num_queries + q) * num_keys;
  }

  // In place over a tile row of n keys starting at key k0, whose entries [lo, hi) hold the products q.k (the others
  // are overwritten): the scores of the keys the row sees, -inf elsewhere. tanh_out, when not
  // null, receives tanh(scale * q.k / softcap) on [lo, hi) (the softcap's derivative is 1 - tanh^2).
  // keys: the row's visible keys (Mask::visible_keys).
  void apply(Scalar* row, Index n, Index k0, Index lo, Index hi, const VisibleKeys& keys, Index b, Index h, Index q,
             Scalar* tanh_out = nullptr) const {
    for (Index j = lo; j < hi; ++j) row[j] *= scale;
    if (has_softcap()) {
      const Scalar inverse = Scalar(1) / softcap;
      for (Index j = lo; j < hi; ++j) {
        const Scalar t = std::tanh(row[j] * inverse);
        if (tanh_out != nullptr) tanh_out[j] = t;
        row[j] = softcap * t;
      }
    }
    if (slopes != nullptr) {
      const Scalar slope = slopes[h];
      const Index p = q + query_offset;
      for (Index j = lo; j < hi; ++j) row[j] -= slope * static_cast<Scalar>(std::abs(p - (k0 + j)));
    }
    if (const Scalar* add = bias_row(b, h, q)) {
      add += k0;
      for (Index j = lo; j < hi; ++j) row[j] += add[j];
    }
    hide(row, n, k0, lo, hi, keys);
  }

  // The mask's part of apply alone: -inf outside [lo, hi) and at the keep row's holes in it.
  static void hide(Scalar* row, Index n, Index k0, Index lo, Index hi, const VisibleKeys& keys) {
    constexpr Scalar hidden = -std::numeric_limits<Scalar>::infinity();
    std::fill(row, row + lo, hidden);
    std::fill(row + hi, row + n, hidden);
    if (!keys.is_range())
      for (Index j = lo; j < hi; ++j)
        if (!keys.keep[k0 + j]) row[j] = hidden;
  }
};

// The rule of a call: options checked by the caller (attend/scaled_dot_product_attention.hpp).
template <class Scalar>
ScoreRule<Scalar> score_rule(const ScoreOptions<Scalar>& options, Index batch, Index num_heads, Index num_queries,
                             Index num_keys, Index head_dim) {
  ScoreRule<Scalar> rule;
  rule.scale = options.scale != Scalar(0) ? options.scale
                                          : Scalar(1) / std::sqrt(static_cast<Scalar>(std::max(head_dim, Index(1))));
  rule.softcap = options.softcap;
  rule.slopes = options.alibi_slopes.empty() ? nullptr : options.alibi_slopes.data();
  if (options.bias.size() > 0) {
    rule.bias = options.bias.data();
    rule.bias_rows = options.bias.dimension(0);
  }
  rule.batch = batch;
  rule.num_heads = num_heads;
  rule.num_queries = num_queries;
  rule.num_keys = num_keys;
  rule.query_offset = num_keys - num_queries;
  return rule;
}

}  // namespace core
}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
