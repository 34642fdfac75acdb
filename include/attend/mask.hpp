// attend/mask.hpp — which keys each query may attend to, and what a query that may attend to none gets.
//
// A Mask is the AND of up to four parts, each optional (a default Mask keeps every key). Key j of query q in batch
// row b is kept by
//   valid lengths   ValidLens, (batch,) or (batch, queries)        when j < len(b, q)
//   causal          Mask::causal()                                 when j <= q + (keys - queries)
//   keep tensor     Mask::keep(K), K: Tensor3<bool>,               when K(b, q, j) (K(0, q, j) for every b when K has
//                   (batch, queries, keys) or (1, queries, keys)   batch 1): true means attend
//   window          Mask::window(left, right)                      when p - left <= j <= p + right, p = q + (keys -
//                                                                  queries) the query's aligned position
// Mask::window(W - 1, 0) && Mask::causal() (or Mask::window(W - 1, 0) alone) is Mistral's sliding window of W keys,
// the query's own key among them; two windows AND into the narrower of each side. A ValidLens converts to a Mask
// implicitly, so every call that took valid lengths takes a Mask unchanged:
//   attention(X, X, X, ValidLens{3, 2})
//   attention(X, X, X, ValidLens{3, 2} && Mask::causal())
//   attention(X, X, X, Mask::keep(K).when_fully_masked(FullyMasked::zero))
//
// Causal is aligned bottom-right, as for a decoder whose earlier keys are cached: the last query sees every key,
// the query before it every key but the last, and so on. With as many queries as keys this is the usual lower
// triangle (j <= q); with more queries than keys the first (queries - keys) queries see no key at all.
//
// Semantics, one rule for every part: the score of a masked key is *replaced* by -1e6 before the softmax, exactly as
// d2l's sequence_mask(..., value=-1e6) does for valid lengths, and the softmax flushes exp() underflow to exactly 0.
// So a masked key's weight is exactly 0 whenever the largest kept score m of its row satisfies
//   m > -1e6 + 87.34 (float)      m > -1e6 + 708.40 (double)
// i.e. when -1e6 - m (computed exactly) is below ln of the smallest normal number, -87.3365 in float and -708.3964 in
// double; just above those bounds the weight is tiny but not 0. Within that range a masked key's weight is 0 as with
// PyTorch's -inf attention mask, and FullyMasked::zero gives what recent PyTorch's scaled_dot_product_attention gives.
// Below it d2l's rule shows through: a masked key gets the weight exp(-1e6 - m) / sum > 0, and all of it (shared
// with the other masked keys) when m is far below -1e6. No -inf is ever used.
//
// A query that sees no key (valid length 0, a causal row with more queries than keys, an all-false keep row, or an
// AND of these) follows the mask's FullyMasked rule:
//   FullyMasked::uniform  (the default) d2l's result: every score is -1e6, so every weight is exactly 1 / keys and
//                         the output row is the mean of the values;
//   FullyMasked::zero     the weights row is exactly 0 and so is the output row (PyTorch's scaled_dot_product_attention
//                         in recent versions).
// Neither gives NaN. The rule belongs to the mask: Mask::causal().when_fully_masked(FullyMasked::zero); a && b has the
// rule either operand chose (two different choices throw), FullyMasked::uniform when neither chose. A query is fully
// masked by the mask's structure alone, not by its scores.
//
// Multi-head attention applies the mask of batch row b to every head of that row, as d2l's repeat_interleave does for
// valid lengths. Shapes are checked by require_shape() at every public entry point; the per-row accessors below
// (visible_keys, visible_prefix, keep_row, keeps) assume that check has passed. visible_keys() is the one description
// of a row's keys that the softmax and both attention paths iterate.
#pragma once

#include <attend/config.hpp>

#include <algorithm>
#include <attend/tensor.hpp>
#include <attend/valid_lens.hpp>

#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {

// What a query that sees no key gets; see the top of this file.
enum class FullyMasked { uniform, zero };

// The keys one query sees, as every attention path and the softmax iterate them: key j is visible when
// first <= j < last and (keep == nullptr || keep[j]). [first, last) is the smallest range that holds every visible
// key (with a keep row, narrowed to its first and last kept key), so a query that sees no key has first == last.
struct VisibleKeys {
  Index first = 0, last = 0;   // the visible range
  const bool* keep = nullptr;  // the keep row, indexed by key (num_keys); null: every key of the range is visible

  bool none() const { return first >= last; }
  // No hole inside the range: every key of [first, last) is visible.
  bool is_range() const { return keep == nullptr; }
  bool sees(Index j) const { return j >= first && j < last && (keep == nullptr || keep[j]); }

  // The part of the range inside the block of keys [k0, k0 + n), counted from k0: [lo, hi) with 0 <= lo <= hi <= n,
  // empty when the range is, or misses the block.
  struct Span {
    Index lo, hi;
  };
  Span within(Index k0, Index n) const {
    const Index lo = std::clamp(first - k0, Index(0), n);
    return {lo, std::clamp(last - k0, lo, n)};
  }
  // Whether the range overlaps the block of keys [k0, k0 + n) (a key of the overlap may still be a hole).
  bool overlaps(Index k0, Index n) const {
    const Span span = within(k0, n);
    return span.lo < span.hi;
  }

  // visit(j) for every visible key j in [lo, hi) (clipped to the range), in increasing order.
  template <class Visit>
  void for_each(Index lo, Index hi, Visit&& visit) const {
    lo = std::max(lo, first);
    hi = std::min(hi, last);
    for (Index j = lo; j < hi; ++j)
      if (keep == nullptr || keep[j]) visit(j);
  }
  template <class Visit>
  void for_each(Visit&& visit) const {
    for_each(first, last, visit);
  }
};

inline const char* to_string(FullyMasked rule) {
  return rule == FullyMasked::zero ? "FullyMasked::zero" : "FullyMasked::uniform";
}

class Mask {
 public:
  // Keeps every key.
  Mask() = default;

  // d2l's valid lengths; implicit, so that a ValidLens is accepted wherever a Mask is.
  Mask(ValidLens valid_lens) : lens_(std::move(valid_lens)) {}

  // One valid length per batch row, as ValidLens{3, 2}: attention(X, X, X, {3, 2}).
  Mask(std::initializer_list<Index> per_batch) : lens_(per_batch) {}

  // Query q of Q queries sees key j of K keys when j <= q + (K - Q): bottom-right aligned.
  static Mask causal() {
    Mask m;
    m.causal_ = true;
    return m;
  }

  // keep: (batch, queries, keys) or (1, queries, keys); true means attend.
  static Mask keep(Tensor3<bool> keep) {
    Mask m;
    m.keep_ = std::make_shared<const Tensor3<bool>>(std::move(keep));
    return m;
  }

  // Query at aligned position p = q + (K - Q) sees key j when p - left <= j <= p + right. left, right >= 0.
  static Mask window(Index left, Index right) {
    detail::require(left >= 0, "Mask::window: left must be >= 0, got ", left);
    detail::require(right >= 0, "Mask::window: right must be >= 0, got ", right);
    Mask m;
    m.window_ = true;
    m.left_ = left;
    m.right_ = right;
    return m;
  }

  // A copy of this mask with the rule for a query that sees no key.
  Mask when_fully_masked(FullyMasked rule) const {
    Mask m = *this;
    m.rule_ = rule;
    m.rule_chosen_ = true;
    return m;
  }

  // Keeps a key only where both masks keep it. Valid lengths combine into their minimum, keep tensors element by
  // element (one of batch 1 broadcasts over the other). The rule is the one either operand chose; choosing two
  // different rules is an error.
  friend Mask operator&&(const Mask& a, const Mask& b) {
    Mask m;
    m.lens_ = both_lens(a.lens_, b.lens_);
    m.causal_ = a.causal_ || b.causal_;
    m.window_ = a.window_ || b.window_;
    m.left_ = both_side(a.window_, a.left_, b.window_, b.left_);
    m.right_ = both_side(a.window_, a.right_, b.window_, b.right_);
    m.keep_ = both_keep(a.keep_, b.keep_);
    detail::require(!(a.rule_chosen_ && b.rule_chosen_ && a.rule_ != b.rule_),
                    "Mask &&: the operands choose different rules for a fully masked query, ", to_string(a.rule_),
                    " and ", to_string(b.rule_));
    m.rule_chosen_ = a.rule_chosen_ || b.rule_chosen_;
    m.rule_ = a.rule_chosen_ ? a.rule_ : b.rule_;
    return m;
  }

  // True when the mask keeps every key (whatever its rule: with no masked key, no query is fully masked).
  bool empty() const { return lens_.empty() && !causal_ && !window_ && !keep_; }
  FullyMasked fully_masked() const { return rule_; }
  const ValidLens& valid_lens() const { return lens_; }
  bool is_causal() const { return causal_; }
  bool has_window() const { return window_; }
  Index window_left() const { return left_; }    // meaningful when has_window()
  Index window_right() const { return right_; }  // meaningful when has_window()
  // True when a keep tensor is part of the mask: keys below visible_prefix() need keep_row() too.
  bool has_elementwise() const { return static_cast<bool>(keep_); }
  // The keep tensor, (batch or 1, queries, keys); null when there is none.
  const Tensor3<bool>* keep_tensor() const { return keep_.get(); }

  // Throws std::invalid_argument unless the mask fits scores of shape (batch, num_queries, num_keys).
  void require_shape(Index batch, Index num_queries, Index num_keys, const char* where) const {
    lens_.require_shape(batch, num_queries, where);
    if (!keep_) return;
    const auto& d = keep_->dimensions();
    const bool ok = d[1] == num_queries && d[2] == num_keys && (d[0] == batch || d[0] == 1);
    if (batch == 1) {
      detail::require(ok, where, ": mask's keep tensor must have shape (1, ", num_queries, ", ", num_keys,
                      ") (batch, queries, keys), got ", detail::shape_text(d));
    } else {
      detail::require(ok, where, ": mask's keep tensor must have shape (", batch, ", ", num_queries, ", ", num_keys,
                      ") or (1, ", num_queries, ", ", num_keys, ") (batch or 1, queries, keys), got ",
                      detail::shape_text(d));
    }
  }

  // Every key j >= visible_prefix(b, q, ...) of query q in batch row b is masked: the minimum of num_keys, the valid
  // length and the causal limit q + 1 + (num_keys - num_queries) (never below 0). Without a keep tensor the keys
  // below it are all kept; with one, keep_row() decides each of them.
  Index visible_prefix(Index b, Index q, Index num_queries, Index num_keys) const {
    Index prefix = num_keys;
    if (!lens_.empty()) prefix = std::min(prefix, lens_.length(b, q));
    if (causal_) prefix = std::min(prefix, std::max(Index(0), q + 1 + num_keys - num_queries));
    return prefix;
  }

  // The keys query q of batch row b sees: visible_prefix(), cut to the window's [p - left, p + right] when there is
  // one, and, with a keep tensor, keep_row() narrowed to its first and last kept key. Throws std::invalid_argument as
  // keep_row() does.
  VisibleKeys visible_keys(Index b, Index q, Index num_queries, Index num_keys) const {
    VisibleKeys keys{0, visible_prefix(b, q, num_queries, num_keys), keep_row(b, q)};
    if (window_) {
      const Index p = q + num_keys - num_queries;  // the aligned position, in [num_keys - num_queries, num_keys)
      // A side of num_keys + num_queries or more already reaches past every key from any p: capped there, so that
      // p - left and p + right + 1 cannot overflow (Mask::window(0, max()) is a valid "no right limit").
      const Index reach = num_keys + num_queries;
      const Index left = std::min(left_, reach), right = std::min(right_, reach);
      keys.first = std::clamp(p - left, Index(0), num_keys);
      keys.last = std::min(keys.last, std::clamp(p + right + 1, Index(0), num_keys));
      keys.last = std::max(keys.last, keys.first);
    }
    if (keys.keep != nullptr) {
      while (keys.first < keys.last && !keys.keep[keys.first]) ++keys.first;
      while (keys.last > keys.first && !keys.keep[keys.last - 1]) --keys.last;
    }
    return keys;
  }

  // Row (b, q) of the keep tensor, (num_keys) contiguous; null when there is no keep tensor. Throws
  // std::invalid_argument when b (unless the keep tensor has batch 1) or q is outside the keep tensor.
  const bool* keep_row(Index b, Index q) const {
    if (!keep_) return nullptr;
    const bool broadcast = keep_->dimension(0) == 1;
    if (!broadcast) require_index(b, keep_->dimension(0), "Mask::keep_row", "b");
    require_index(q, keep_->dimension(1), "Mask::keep_row", "q");
    const Index rows = broadcast ? 0 : b;
    return keep_->data() + (rows * keep_->dimension(1) + q) * keep_->dimension(2);
  }

  // Whether key j of query q in batch row b is kept: the whole mask, one element. Throws std::invalid_argument when
  // q or j is out of range (b is checked against the valid lengths and the keep tensor, which know the batch).
  bool keeps(Index b, Index q, Index j, Index num_queries, Index num_keys) const {
    require_index(q, num_queries, "Mask::keeps", "q");
    require_index(j, num_keys, "Mask::keeps", "j");
    return visible_keys(b, q, num_queries, num_keys).sees(j);
  }

 private:
  static void require_index(Index i, Index size, const char* where, const char* name) {
    detail::require(i >= 0 && i < size, where, ": ", name, " must be in [0, ", size, "), got ", i);
  }

  // One side of the AND of two windows: the narrower.
  static Index both_side(bool a_has, Index a, bool b_has, Index b) {
    if (a_has && b_has) return std::min(a, b);
    return a_has ? a : b;
  }

  static std::string lens_shape(const ValidLens& lens) {
    if (lens.kind() == ValidLens::Kind::per_batch) return detail::message('(', lens.batch(), ",)");
    return detail::message('(', lens.batch(), ", ", lens.queries(), ')');
  }

  static ValidLens both_lens(const ValidLens& a, const ValidLens& b) {
    if (a.empty()) return b;
    if (b.empty()) return a;
    const bool same_kind = a.kind() == b.kind();
    detail::require(a.batch() == b.batch() && (!same_kind || a.queries() == b.queries()),
                    "Mask &&: valid lengths must describe the same batch rows", same_kind ? " and queries" : "",
                    ", got valid_lens ", lens_shape(a), " and ", lens_shape(b));
    if (a.kind() == ValidLens::Kind::per_batch && same_kind) {
      std::vector<Index> lens(static_cast<std::size_t>(a.batch()));
      for (Index r = 0; r < a.batch(); ++r)
        lens[static_cast<std::size_t>(r)] = std::min(a.length(r, 0), b.length(r, 0));
      return ValidLens::per_batch(std::move(lens));
    }
    const Index queries = (a.kind() == ValidLens::Kind::per_query ? a : b).queries();
    Matrix<Index> lens(a.batch(), queries);  // (batch, queries)
    for (Index r = 0; r < a.batch(); ++r)
      for (Index q = 0; q < queries; ++q) lens(r, q) = std::min(a.length(r, q), b.length(r, q));
    return ValidLens::per_query(lens);
  }

  using KeepPtr = std::shared_ptr<const Tensor3<bool>>;

  static KeepPtr both_keep(const KeepPtr& a, const KeepPtr& b) {
    if (!a) return b;
    if (!b) return a;
    const auto &da = a->dimensions(), &db = b->dimensions();
    detail::require(da[1] == db[1] && da[2] == db[2] && (da[0] == db[0] || da[0] == 1 || db[0] == 1),
                    "Mask &&: keep tensors must have the same (queries, keys) and batch sizes that are equal or 1, "
                    "got ",
                    detail::shape_text(da), " and ", detail::shape_text(db));
    const Index batch = da[0] == 1 ? db[0] : da[0];
    Tensor3<bool> both(batch, da[1], da[2]);  // (batch, queries, keys)
    for (Index r = 0; r < batch; ++r)
      for (Index q = 0; q < da[1]; ++q)
        for (Index j = 0; j < da[2]; ++j)
          both(r, q, j) = (*a)(da[0] == 1 ? 0 : r, q, j) && (*b)(db[0] == 1 ? 0 : r, q, j);
    return std::make_shared<const Tensor3<bool>>(std::move(both));
  }

  ValidLens lens_;  // none, (batch,) or (batch, queries)
  bool causal_ = false;
  bool window_ = false;
  Index left_ = 0, right_ = 0;  // the window's sides, when window_
  KeepPtr keep_;  // (batch or 1, queries, keys); shared, never written after construction
  FullyMasked rule_ = FullyMasked::uniform;
  bool rule_chosen_ = false;
};

}  // namespace ATTEND_ABI
}  // namespace attend
