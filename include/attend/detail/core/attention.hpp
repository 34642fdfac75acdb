// attend/detail/core/attention.hpp — scaled dot-product attention over heads views: the forward pass (with its
// log-sum-exp) and the backward pass, for grouped-query heads, every mask and every score option.
//
// Data only: the call is the heads views of Q, K and V (detail/heads.hpp: strides, a cache's spare rows), the mask,
// the score rule (detail/core/score_rule.hpp) and dropout; the products, maxima and exponentials are the active
// level's row kernels (detail/kernels.hpp). Query head h reads key/value head g = h / group, group = H / G.
//
// Forward, one piece of work per (batch row b, key/value head g, block of core_query_rows queries, span of keys):
// each block of core_key_rows keys is read once for all the group's query heads — which take turns over it or, for
// at most decode_queries rows, are all the rows of its products (attend_keys) — and an online softmax keeps each
// row's running maximum m and sum l, and O = acc / l, lse = m + log l at the end. The blocks of keys run from the first
// key some row of the query block sees to one past the last (the union of the rows' visible ranges), so no key
// outside it is scored: a window of W keys costs n (W + core_query_rows - 1) scores, not whole blocks of keys across
// the window's edges. A call of at most decode_queries queries with at least
// two spans of decode_span keys splits its keys into those spans (flash-decoding): each span is a piece of its own,
// and the partial results merge by their log-sum-exp in key order. The pieces are fixed by the shape alone: the bits
// do not depend on the thread count.
//
// Backward (FlashAttention-2's rule, from O, lse and dO): D = rowsum(dO * O); on each tile P = exp(s - lse),
// dS = P (dP - D) with dP = dO V^T (times the dropout factors), then the softcap's derivative 1 - tanh^2 and the
// scale; dV += (P Z)^T dO, dK += dS^T Q, dQ += dS K. One pass over the key blocks: the piece (b, g, split) owns the
// dK and dV rows of every splits-th key block of its key/value head, and adds into its split's own dQ; the splits'
// dQ are summed in split order at the end, so the bits depend on the shape alone. A product whose right operand holds
// an inf or NaN (a key block for dQ, a block of dO for dV, of Q for dK) adds term by term, skipping the zero weights
// and gradients of keys a row does not see, so a gradient gets NaN only from the entries it depends on.
//
// A query that sees no key by the mask's structure: FullyMasked::zero gives a zero row, FullyMasked::uniform d2l's
// mean of every value (weights 1 / num_keys, no gradient to Q or K, dO / num_keys to each value); lse is -inf.
#pragma once

#include <algorithm>
#include <attend/config.hpp>
#include <attend/detail/attention_dropout.hpp>
#include <attend/detail/core/score_rule.hpp>
#include <attend/detail/heads.hpp>
#include <attend/detail/kernels.hpp>
#include <attend/detail/packet_buffer.hpp>
#include <attend/detail/tuning.hpp>
#include <attend/mask.hpp>
#include <attend/tensor.hpp>
#include <attend/threads.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {
namespace core {

// Queries, keys and values are stored as Stored and computed on in Scalar: Scalar itself, or bfloat16 for a float call
// on a level with the kernels of bfloat16 storage (Kernels::bf16_scores and the rest), which read them in place
// (attend_keys).
template <class Scalar, class Stored = Scalar>
struct Call {
  Heads<const Stored> queries;  // (batch, Q, H heads of d)
  Heads<const Stored> keys;     // (batch, K, G heads of d)
  Heads<const Stored> values;   // (batch, K, G heads of dv)
  const Mask* mask = nullptr;   // shape checked against (batch, Q, K)
  ScoreRule<Scalar> rule;
  AttentionDropout dropout;  // on the weights, training only

  Index group() const { return queries.count / keys.count; }
};

// The call of d2l's scaled dot-product attention, softmax(Q K^T / sqrt(d)) V under a mask, with no other score option:
// what MultiHeadAttention's and DotProductAttention's tiled path run.
template <class Scalar>
Call<Scalar> scaled_call(const Heads<const Scalar>& Q, const Heads<const Scalar>& K, const Heads<const Scalar>& V,
                         const Mask& mask, const AttentionDropout& dropout) {
  return {Q, K, V, &mask, score_rule(ScoreOptions<Scalar>{}, Q.batch, Q.count, Q.length, K.length, Q.dim), dropout};
}

// Grow-only memory of the core: a repeated call of one shape allocates nothing. Its elements are of the type the
// arithmetic runs in, so that a call on bfloat16 hands the same buffers to the float core it runs on (Buffers<Scalar>).
template <class Scalar>
struct BuffersOf {
  std::vector<PacketBuffer<Scalar>> scratch;   // one per thread, packet-aligned: packed panels and tiles
  std::vector<std::vector<VisibleKeys>> rows;  // one per thread: the visible keys of a block's query rows
  Vector<Scalar> partial;                      // the decoding spans' acc, m and l
  Vector<Scalar> deltas;                       // the backward pass's D, (batch, Q, H)
  PacketBuffer<Scalar> keys_packed;            // K^T of every key block, packed once for all its query blocks
  PacketBuffer<Scalar> values_packed;          // the values of every key block, likewise
  PacketBuffer<Scalar> widened;                // a reduced call's Q, K, V and output, widened to Scalar
  Tensor3<Scalar> widened_lse;                 // a reduced call's lse before rounding, (batch, Q, H)

  // Per thread: `size` Scalars and `rows` VisibleKeys.
  void reserve(Index size, Index rows_per_block) {
    const auto threads = static_cast<std::size_t>(std::max(1, num_threads()));
    if (scratch.size() < threads) scratch.resize(threads);
    if (this->rows.size() < threads) this->rows.resize(threads);
    for (auto& s : scratch) s.resize(size);
    for (auto& r : this->rows)
      if (static_cast<Index>(r.size()) < rows_per_block) r.resize(static_cast<std::size_t>(rows_per_block));
  }
  static void grow(Vector<Scalar>& v, Index size) {
    if (v.size() < size) v.resize(size);
  }
};
template <class Scalar>
using Buffers = BuffersOf<compute_type<Scalar>>;

// The union of the visible ranges of a block's rows, [first, last) ([0, 0) when none sees a key), after filling
// keys[i] for the rows q0 .. q0 + rows - 1 of batch row b.
inline std::pair<Index, Index> block_visible(const Mask& mask, Index b, Index q0, Index rows, Index num_queries,
                                             Index num_keys, VisibleKeys* keys) {
  Index first = num_keys, last = 0;
  for (Index i = 0; i < rows; ++i) {
    keys[i] = mask.empty() ? VisibleKeys{0, num_keys, nullptr} : mask.visible_keys(b, q0 + i, num_queries, num_keys);
    if (!keys[i].none()) {
      first = std::min(first, keys[i].first);
      last = std::max(last, keys[i].last);
    }
  }
  if (first >= last) return {0, 0};
  return {first, last};
}

// The output row of query q of head pair (b * H + h) that sees no key under FullyMasked::uniform: d2l's weights
// 1 / num_keys on every value of key/value head g in batch row b, dropped as any weight is in training.
template <class Scalar, class Stored>
void uniform_row(const Heads<const Stored>& values, const AttentionDropout& dropout, Index b, Index g, Index pair,
                 Index q, Scalar* out) {
  const Index dv = values.dim, nk = values.length;
  std::fill(out, out + dv, Scalar(0));
  if (nk == 0) return;
  const Scalar share = Scalar(1) / static_cast<Scalar>(nk);
  if (!dropout.active()) {  // the mean: a sum, then one product
    for (Index j = 0; j < nk; ++j) {
      const Stored* v = values.at(b, g, j);
      for (Index c = 0; c < dv; ++c) out[c] += static_cast<Scalar>(v[c]);
    }
    for (Index c = 0; c < dv; ++c) out[c] *= share;
    return;
  }
  for (Index j = 0; j < nk; ++j) {
    Scalar w = share;
    dropout.apply(&w, 1, pair, q, j);
    const Stored* v = values.at(b, g, j);
    for (Index c = 0; c < dv; ++c) out[c] += w * static_cast<Scalar>(v[c]);
  }
}

// How the forward pass splits a call.
struct ForwardPlan {
  Index query_blocks, span, spans;
  bool split() const { return spans > 1; }
};

inline ForwardPlan forward_plan(Index num_queries, Index num_keys) {
  const Index blocks = (num_queries + tuning::core_query_rows - 1) / tuning::core_query_rows;
  if (num_queries <= tuning::decode_queries && num_keys >= 2 * tuning::decode_span)
    return {blocks, tuning::decode_span, (num_keys + tuning::decode_span - 1) / tuning::decode_span};
  return {blocks, std::max(num_keys, Index(1)), 1};
}

// Scalars of one forward piece's acc (rows, dv), m and l (rows), its rows the group's heads of a block of queries.
inline Index piece_scalars(Index num_queries, Index group, Index value_dim) {
  return std::min(tuning::core_query_rows, num_queries) * group * (value_dim + 2);
}

// Scalars of the decoding spans' partial results (acc, m and l of every row of every piece) for a call of these
// sizes; 0 when the call does not split its keys.
inline Index partial_size(Index batch, Index kv_heads, Index group, Index num_queries, Index num_keys,
                          Index value_dim) {
  const ForwardPlan plan = forward_plan(num_queries, num_keys);
  if (!plan.split()) return 0;
  return batch * kv_heads * plan.query_blocks * plan.spans * piece_scalars(num_queries, group, value_dim);
}

// Row `row` of the scores of keys [k0, k0 + n) for query q of head h made ready for the online softmax: the score
// rule on the keys the row sees in [lo, hi), -inf elsewhere; the scale is left to online_softmax_rows when it is the
// rule's one option.
template <class Scalar, class Stored>
void prepare_row(const Call<Scalar, Stored>& call, Scalar* row, Index n, Index k0, Index lo, Index hi,
                 const VisibleKeys& visible, Index b, Index h, Index q) {
  auto [a, z] = visible.within(k0, n);
  a = std::max(a, lo - k0);
  z = std::min(z, hi - k0);
  if (a >= z)
    std::fill(row, row + n, -std::numeric_limits<Scalar>::infinity());
  else if (call.rule.scale_only())
    ScoreRule<Scalar>::hide(row, n, k0, a, z, visible);
  else
    call.rule.apply(row, n, k0, a, z, visible, b, h, q);
}

// The online softmax's step of `rows` query rows q0 .. of head h over the keys [k0, k0 + n) (only [lo, hi) count):
// their products q.k in S (rows, n) become the weights (0 for a key a row does not see), and their acc (rows, dv), m
// and l are rescaled and updated (the level's online_softmax_rows); then dropout. keys: the rows' visible keys.
// False when no row sees a key here (S then all 0).
template <class Scalar, class Stored>
bool online_rows(const Call<Scalar, Stored>& call, const Kernels<Scalar>& kernel, Scalar* S, Index rows, Index n, Index k0,
                 Index lo, Index hi, const VisibleKeys* keys, Index b, Index h, Index q0, Scalar* acc, Scalar* m,
                 Scalar* l) {
  for (Index i = 0; i < rows; ++i) prepare_row(call, S + i * n, n, k0, lo, hi, keys[i], b, h, q0 + i);
  const Scalar scale = call.rule.scale_only() ? call.rule.scale : Scalar(1);
  const Index dv = call.values.dim;
  if (!kernel.online_softmax_rows(S, rows, n, n, scale, {m, l, acc, dv, dv})) return false;
  if (call.dropout.active())
    for (Index i = 0; i < rows; ++i) call.dropout.apply(S + i * n, n, b * call.queries.count + h, q0 + i, k0);
  return true;
}

// The blocks of keys and values of every (batch row, key/value head), packed once per call into the row kernel's
// micro-panels when more than one query block reads them: panel t of pair (b, g) holds K^T of keys
// [t core_key_rows, (t + 1) core_key_rows), (d, core_key_rows padded to whole packets), and their values
// (core_key_rows, dv padded). Empty (null) otherwise: each piece then packs the blocks it reads itself.
template <class Scalar>
struct PackedBlocks {
  const Scalar* keys = nullptr;
  const Scalar* values = nullptr;
  Index panels = 0, key_size = 0, value_size = 0;  // per pair: panels; Scalars per panel

  static PackedBlocks plan(const Call<Scalar>& call) {
    PackedBlocks p;
    p.panels = (call.keys.length + tuning::core_key_rows - 1) / tuning::core_key_rows;
    p.key_size = call.queries.dim * padded_to_packets<Scalar>(tuning::core_key_rows);
    p.value_size = tuning::core_key_rows * padded_to_packets<Scalar>(call.values.dim);
    return p;
  }
  explicit operator bool() const { return keys != nullptr; }
  const Scalar* key_panel(Index pair, Index t) const { return keys + (pair * panels + t) * key_size; }
  const Scalar* value_panel(Index pair, Index t) const { return values + (pair * panels + t) * value_size; }
};

// Y (rows, columns) += X B term by term, skipping X's entries that are 0: the chain of each element of the whole
// product less its terms of weight 0, so that a weight or gradient that is 0 because its key is hidden from its row
// never meets an inf or NaN of B (0 times inf is NaN). X's entry (r, k) at X[r * row_step + k * step] (A^T read in
// place with row_step 1); B's rows ldb apart. For blocks whose B is not finite only, forward and backward.
template <class Scalar>
void add_nonzero_terms(const Kernels<Scalar>& kernel, const Scalar* X, Index row_step, Index step, Index rows,
                       Index steps, const Scalar* B, Index ldb, Index columns, Scalar* Y, Index ldy) {
  for (Index r = 0; r < rows; ++r)
    for (Index k = 0; k < steps; ++k) {
      const Scalar* x = X + r * row_step + k * step;
      if (*x != Scalar(0))
        kernel.times_matrix(x_rows(x, 1, 1), 1, b_rows(B + k * ldb, ldb), columns, y_added(Y + r * ldy, ldy));
    }
}

// Rows of a thread's scores in the forward pass: a block of one head's query rows, or the group's heads of a few.
template <class Scalar, class Stored>
Index score_rows(const Call<Scalar, Stored>& call) {
  return std::max(tuning::core_query_rows, call.group() * tuning::decode_queries);
}

// Where the parts of one thread's scratch in the forward pass start, in Scalars: the key block (d, kb) transposed or
// packed from 0, the value block packed (kb, dv padded to whole packets), the scores (score_rows, kb), then acc, m
// and l; size: the whole.
template <class Scalar>
struct ForwardScratch {
  Index values, scores, acc, size;
  template <class Stored>
  explicit ForwardScratch(const Call<Scalar, Stored>& call) {
    const Index kb = tuning::core_key_rows, dv = call.values.dim;
    values = call.queries.dim * kb;
    scores = values + kb * padded_to_packets<Scalar>(dv);
    acc = scores + score_rows(call) * kb;
    size = acc + piece_scalars(call.queries.length, call.group(), dv);
  }
};

// Whether every entry of the (n, columns) rows from V, rows ld apart, is finite: of bfloat16, its exponent bits not all
// ones (the integer test, where bfloat16's own arithmetic would convert each entry to float and back).
template <class Stored>
bool rows_finite(const Stored* V, Index n, Index columns, Index ld) {
  if constexpr (is_reduced<Stored>) {
    constexpr std::uint16_t exponent = 0x7f80;
    std::uint16_t not_finite = 0;  // exponent when some entry's exponent bits are all ones
    for (Index j = 0; j < n; ++j) {
      const Stored* v = V + j * ld;
      for (Index c = 0; c < columns; ++c) {
        std::uint16_t bits;
        std::memcpy(&bits, v + c, sizeof bits);
        not_finite |= static_cast<std::uint16_t>((bits & exponent) == exponent ? exponent : 0);
      }
    }
    return not_finite == 0;
  } else {
    return all_finite(Eigen::Map<const Matrix<Stored>, 0, Eigen::OuterStride<>>(V, n, columns, Eigen::OuterStride<>(ld)));
  }
}

// The online softmax of one block of query rows of the group over the keys [lo, hi): acc (group * rows, dv) rows dv
// apart, m and l (group * rows) updated, row r = hh * rows + i for head hh of the group and query row i. keys: the
// rows' visible keys.
//
// Each block of keys is read once, for all the group's heads. At most decode_queries rows (decoding, or a few
// queries checked at once): the group's query heads, which lie head_stride apart in each query row, are the rows of
// one product with the block per query row (few_scores: the keys read in place where the level has a few-rows
// kernel, else transposed once), and all the group's weights times the block's values one product: the block of keys
// and values is read once for the whole group. More rows: the blocks of
// keys (as K^T) and of values are packed into the row kernel's micro-panels once, and each head of the group in turn
// multiplies over them (a product of that many rows would otherwise pack its operand itself, once per head). Stored
// in bfloat16, the blocks are packed into pairs (the table's bf16_pack_keys, bf16_pack_values) once for the group's
// heads instead, and each head's weights are rounded to bfloat16 for their product with the values (as FlashAttention
// and PyTorch's CPU kernel round them). Either way a head none of whose rows sees a key of the block adds nothing for
// it (not 0 times the values, which would turn a value's inf into NaN).
template <class Scalar, class Stored>
void attend_keys(const Call<Scalar, Stored>& call, const Kernels<Scalar>& kernel, const PackedBlocks<Scalar>& packed,
                 Index b, Index g, Index q0, Index rows, Index lo, Index hi, const VisibleKeys* keys, Scalar* acc,
                 Scalar* m, Scalar* l, Scalar* scratch) {
  constexpr bool stored_reduced = !std::is_same<Stored, Scalar>::value;  // bfloat16 read in place: few rows only
  const Heads<const Stored>&Q = call.queries, &K = call.keys, &V = call.values;
  const Index d = Q.dim, dv = V.dim, group = call.group(), h0 = g * group;
  const Index kb = tuning::core_key_rows;
  const ForwardScratch<Scalar> parts(call);
  Scalar* Kt = scratch;                 // (d, kb): the key block transposed, or K^T packed
  Scalar* Vp = scratch + parts.values;  // (kb, dv padded to whole packets): the value block packed
  Scalar* S = scratch + parts.scores;   // (rows, kb) of one head, or (group * rows, kb) for few rows: scores, weights
  // Head hh's rows' online-softmax step on the scores at S + at * n; whether one of them sees a key of the block.
  const auto step = [&](Index hh, Index at, Index k0, Index n) {
    return online_rows(call, kernel, S + at * n, rows, n, k0, lo, hi, keys, b, h0 + hh, q0, acc + hh * rows * dv,
                       m + hh * rows, l + hh * rows);
  };
  // Whether the block's weights may meet its values in a product: when some weight is 0 because its key is hidden
  // from the row (by the mask, the span, a bias of -inf or dropout), only if every value is finite, since 0 times
  // inf or NaN would make NaN a row that does not see that key.
  const auto product_safe = [&](Index k0, Index n, const Stored* Vb) {
    bool every_key_seen = call.rule.bias == nullptr && !call.dropout.active() && k0 >= lo && k0 + n <= hi;
    for (Index i = 0; every_key_seen && i < rows; ++i) {
      const auto [a, z] = keys[i].within(k0, n);
      every_key_seen = keys[i].is_range() && a == 0 && z == n;
    }
    return every_key_seen || rows_finite(Vb, n, dv, V.row_stride);
  };
  // out (count, dv) += P (count, n) times the block's n values, P's rows ldp apart.
  const auto add_values = [&](const Scalar* P, Index ldp, Index count, Index n, const Stored* Vb, Scalar* out) {
    if constexpr (stored_reduced)
      kernel.bf16_weighted_values(P, ldp, count, n, Vb, V.row_stride, dv, out, dv);
    else
      kernel.times_matrix(x_rows(P, ldp, count), n, b_rows(Vb, V.row_stride), dv, y_added(out, dv));
  };
  // add_values where product_safe is false: term by term, skipping the weights that are 0, so that a row that does
  // not see a NaN value gets the bits it has without it.
  const auto add_weighted_values = [&](const Scalar* P, Index count, Index n, const Stored* Vb, Scalar* out) {
    for (Index r = 0; r < count; ++r)
      for (Index j = 0; j < n; ++j)
        if (P[r * n + j] != Scalar(0)) add_values(P + r * n + j, 1, 1, 1, Vb + j * V.row_stride, out + r * dv);
  };
  if (rows > tuning::decode_queries) {
    if constexpr (!stored_reduced) {
      // The group's heads in turn over the n keys from k0, whose K^T is packed (d rows, the first n of `stored`
      // columns) and their values (depth rows, the keys' from row first); safe: product_safe's answer.
      const auto heads_over = [&](Index k0, Index n, const Scalar* Kt_panel, Index stored, const Scalar* Vp_panel,
                                  Index first, Index depth, bool safe) {
        for (Index hh = 0; hh < group; ++hh) {
          kernel.packed_times_matrix(x_rows(Q.at(b, h0 + hh, q0), Q.row_stride, rows), d,
                                     b_packed(Kt_panel, d, stored), n, y_into(S, n));
          if (!step(hh, 0, k0, n)) continue;
          if (safe)
            kernel.packed_times_matrix(x_rows(S, n, rows), n, b_packed(Vp_panel, depth, dv, first), dv,
                                       y_added(acc + hh * rows * dv, dv));
          else
            add_weighted_values(S, rows, n, V.at(b, g, k0), acc + hh * rows * dv);
        }
      };
      if (packed) {  // the call's packed panels, from the micro-panel that holds lo
        const Index pair = b * call.keys.count + g;
        for (Index t = lo / kb; t * kb < hi; ++t) {
          const Index base = t * kb, stored = std::min(kb, K.length - base);
          const Index c0 = kernel.micro_panel_start(std::max(lo - base, Index(0)));
          const Index n = std::min(kb, hi - base) - c0;
          heads_over(base + c0, n, packed.key_panel(pair, t) + c0 * d, stored - c0, packed.value_panel(pair, t), c0,
                     stored, product_safe(base + c0, n, V.at(b, g, base + c0)));
        }
        return;
      }
      for (Index k0 = lo; k0 < hi; k0 += kb) {
        const Index n = std::min(kb, hi - k0);
        const Scalar* Vb = V.at(b, g, k0);  // (n, dv), rows V.row_stride apart
        const bool safe = product_safe(k0, n, Vb);
        kernel.pack_panel(b_columns(K.at(b, g, k0), K.row_stride), d, n, Kt);  // K^T (d, n): entry (c, j) at K[j][c]
        if (safe) kernel.pack_panel(b_rows(Vb, V.row_stride), n, dv, Vp);
        heads_over(k0, n, Kt, n, Vp, 0, n, safe);
      }
    } else {
      // bfloat16 storage: each block of keys, and of values, packed into pairs once for the group's heads; each
      // head's scores from its bfloat16 queries, its online step in float, then its weights rounded to bfloat16 in S
      // times the values' pairs, added to acc in float.
      auto* key_pairs = reinterpret_cast<std::uint32_t*>(Kt);    // (ceil(n / 16) panels of pairs of d by 16 keys)
      auto* value_pairs = reinterpret_cast<std::uint32_t*>(Vp);  // (ceil(dv / 16) panels of pairs of keys by 16)
      for (Index k0 = lo; k0 < hi; k0 += kb) {
        const Index n = std::min(kb, hi - k0);
        const Stored* Vb = V.at(b, g, k0);  // (n, dv), rows V.row_stride apart
        const bool safe = product_safe(k0, n, Vb);
        kernel.bf16_pack_keys(K.at(b, g, k0), K.row_stride, n, d, key_pairs);
        if (safe) kernel.bf16_pack_values(Vb, V.row_stride, n, dv, value_pairs);
        for (Index hh = 0; hh < group; ++hh) {
          kernel.bf16_packed_scores(Q.at(b, h0 + hh, q0), Q.row_stride, rows, d, key_pairs, n, y_into(S, n));
          if (!step(hh, 0, k0, n)) continue;
          if (safe)
            kernel.bf16_rounded_weights_times_values(S, rows, n, value_pairs, dv, y_added(acc + hh * rows * dv, dv));
          else
            add_weighted_values(S, rows, n, Vb, acc + hh * rows * dv);
        }
      }
    }
    return;
  }
  // At most decode_queries rows: S (group * rows, n) = the scores of the n keys from k0, row hh * rows + i head hh's
  // query row i. The level's few-rows kernel reads the keys in place (bfloat16 ones: bf16_scores), up to few_rows of
  // the group's heads at a time, and prefetches the keys of the next block up to hi; otherwise the block is
  // transposed into Kt once for the group's product.
  const auto few_scores = [&](Index k0, Index n) {
    const auto few_rows = [&](auto scores) {
      for (Index i = 0; i < rows; ++i)
        for (Index hh = 0; hh < group; hh += tuning::few_rows)
          scores(Q.at(b, h0 + hh, q0 + i), Q.head_stride, std::min(tuning::few_rows, group - hh), d, K.at(b, g, k0),
                 K.row_stride, n, hi - k0, S + (hh * rows + i) * n, rows * n);
    };
    if constexpr (stored_reduced) {
      few_rows(kernel.bf16_scores);
    } else if (kernel.few_rows_scores != nullptr) {
      few_rows(kernel.few_rows_scores);
    } else {
      kernel.transpose_into(K.at(b, g, k0), K.row_stride, n, d, Kt, n);
      for (Index i = 0; i < rows; ++i)
        kernel.times_matrix(x_rows(Q.at(b, h0, q0 + i), Q.head_stride, group), d, b_rows(Kt, n), n,
                            y_into(S + i * n, rows * n));
    }
  };
  for (Index k0 = lo; k0 < hi; k0 += kb) {
    const Index n = std::min(kb, hi - k0);
    const Stored* Vb = V.at(b, g, k0);  // (n, dv), rows V.row_stride apart
    const bool safe = product_safe(k0, n, Vb);
    few_scores(k0, n);
    bool every_head = true;
    for (Index hh = 0; hh < group; ++hh) {
      const bool any = step(hh, hh * rows, k0, n);
      every_head = every_head && any;
    }
    if (!safe) {
      add_weighted_values(S, group * rows, n, Vb, acc);
    } else if (every_head) {
      add_values(S, n, group * rows, n, Vb, acc);
    } else {  // the heads with a weight, each alone
      for (Index hh = 0; hh < group; ++hh) {
        const Scalar* P = S + hh * rows * n;  // (rows, n)
        if (std::any_of(P, P + rows * n, [](Scalar w) { return w != Scalar(0); }))
          add_values(P, n, rows, n, Vb, acc + hh * rows * dv);
      }
    }
  }
}

// out (batch, Q, H heads of dv) = attention; lse (batch, Q, H) contiguous, or null.
template <class Scalar, class Stored>
void forward(const Call<Scalar, Stored>& call, const Heads<Scalar>& out, Scalar* lse, Buffers<Scalar>& buffers) {
  constexpr bool stored_reduced = !std::is_same<Stored, Scalar>::value;
  const Heads<const Stored>&Q = call.queries, &K = call.keys, &V = call.values;
  const Index B = Q.batch, nq = Q.length, nk = K.length, H = Q.count, G = K.count, dv = V.dim;
  const Index group = call.group();
  if (B == 0 || nq == 0 || H == 0) return;
  const Kernels<Scalar>& kernel = kernels<Scalar>();  // may throw: before any parallel region
  if constexpr (stored_reduced)
    if (kernel.bf16_scores == nullptr)
      throw std::logic_error("attend: a call on bfloat16 storage needs a level with bfloat16 dot products");
  const ForwardPlan plan = forward_plan(nq, nk);
  const Index qb = tuning::core_query_rows;
  const ForwardScratch<Scalar> parts(call);
  buffers.reserve(parts.size, qb);
  const Index piece_size = piece_scalars(nq, group, dv);
  const Index pieces = B * G * plan.query_blocks * plan.spans;
  if (plan.split()) Buffers<Scalar>::grow(buffers.partial, core::partial_size(B, G, group, nq, nk, dv));
  constexpr Scalar none = -std::numeric_limits<Scalar>::infinity();
  const FullyMasked rule = call.mask->fully_masked();
  const Mask& mask = *call.mask;

  // Writes row (b, h, q)'s output and lse from its acc, m and l; keys: its visible keys.
  auto finish = [&](Index b, Index g, Index h, Index q, const VisibleKeys& keys, const Scalar* acc, Scalar m,
                    Scalar l) {
    Scalar* o = out.at(b, h, q);
    if (l > Scalar(0) || std::isnan(l)) {
      const Scalar inverse = Scalar(1) / l;
      for (Index c = 0; c < dv; ++c) o[c] = acc[c] * inverse;
      if (lse != nullptr) lse[(b * nq + q) * H + h] = m + std::log(l);
      return;
    }
    if (keys.none() && rule == FullyMasked::uniform)
      uniform_row(V, call.dropout, b, g, b * H + h, q, o);
    else
      std::fill(o, o + dv, Scalar(0));
    if (lse != nullptr) lse[(b * nq + q) * H + h] = none;
  };

  const double work = static_cast<double>(B) * H * nq * std::max(nk, Index(1)) * (Q.dim + dv);
  PackedBlocks<Scalar> packed;
  if constexpr (!stored_reduced) {  // more than decode_queries rows
    if (nq > tuning::decode_queries && plan.query_blocks > 1 && nk > 0) {
      packed = PackedBlocks<Scalar>::plan(call);
      buffers.keys_packed.resize(B * G * packed.panels * packed.key_size);
      buffers.values_packed.resize(B * G * packed.panels * packed.value_size);
      Scalar* keys_packed = buffers.keys_packed.data();
      Scalar* values_packed = buffers.values_packed.data();
      packed.keys = keys_packed;
      packed.values = values_packed;
      const Index kb = tuning::core_key_rows;
      parallel_for(B * G * packed.panels, static_cast<double>(B * G) * nk * (Q.dim + dv), [&](Index item, int) {
        const Index t = item % packed.panels, pair = item / packed.panels, b = pair / G, g = pair % G;
        const Index k0 = t * kb, n = std::min(kb, nk - k0);
        kernel.pack_panel(b_columns(K.at(b, g, k0), K.row_stride), Q.dim, n, keys_packed + item * packed.key_size);
        kernel.pack_panel(b_rows(V.at(b, g, k0), V.row_stride), n, dv, values_packed + item * packed.value_size);
      });
    }
  }
  parallel_for(pieces, work, [&](Index piece, int thread) {
    const Index span = piece % plan.spans, block = piece / plan.spans % plan.query_blocks;
    const Index g = piece / plan.spans / plan.query_blocks % G, b = piece / plan.spans / plan.query_blocks / G;
    const Index q0 = block * qb, rows = std::min(qb, nq - q0);
    Scalar* scratch = buffers.scratch[static_cast<std::size_t>(thread)].data();
    VisibleKeys* keys = buffers.rows[static_cast<std::size_t>(thread)].data();
    Scalar* acc = plan.split() ? buffers.partial.data() + piece * piece_size : scratch + parts.acc;
    Scalar* m = acc + group * rows * dv;
    Scalar* l = m + group * rows;
    std::fill(acc, acc + group * rows * dv, Scalar(0));
    std::fill(m, m + group * rows, none);
    std::fill(l, l + group * rows, Scalar(0));
    auto [first, last] = block_visible(mask, b, q0, rows, nq, nk, keys);
    first = std::max(first, span * plan.span);
    last = std::min(last, (span + 1) * plan.span);
    if (first < last) attend_keys(call, kernel, packed, b, g, q0, rows, first, last, keys, acc, m, l, scratch + 0);
    if (plan.split()) return;
    for (Index hh = 0; hh < group; ++hh)
      for (Index i = 0; i < rows; ++i) {
        const Index r = hh * rows + i;
        finish(b, g, g * group + hh, q0 + i, keys[i], acc + r * dv, m[r], l[r]);
      }
  });
  if (!plan.split()) return;

  // Merge the spans of each row in key order: O = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s.
  std::vector<VisibleKeys>& keys = buffers.rows[0];
  Scalar* merged = buffers.scratch[0].data();  // (dv) acc
  for (Index b = 0; b < B; ++b)
    for (Index g = 0; g < G; ++g)
      for (Index block = 0; block < plan.query_blocks; ++block) {
        const Index q0 = block * qb, rows = std::min(qb, nq - q0);
        block_visible(mask, b, q0, rows, nq, nk, keys.data());
        const Index first_piece = ((b * G + g) * plan.query_blocks + block) * plan.spans;
        for (Index r = 0; r < group * rows; ++r) {
          Scalar M = none;
          bool nan = false;  // a span's NaN score makes the row NaN
          for (Index s = 0; s < plan.spans; ++s) {
            const Scalar* part = buffers.partial.data() + (first_piece + s) * piece_size;
            const Scalar l = part[group * rows * dv + group * rows + r];
            if (l > Scalar(0)) M = std::max(M, part[group * rows * dv + r]);
            nan = nan || std::isnan(l);
          }
          Scalar L = 0;
          std::fill(merged, merged + dv, Scalar(0));
          for (Index s = 0; s < plan.spans && M != none; ++s) {
            const Scalar* part = buffers.partial.data() + (first_piece + s) * piece_size;
            const Scalar l = part[group * rows * dv + group * rows + r];
            if (!(l > Scalar(0))) continue;
            const Scalar factor = std::exp(part[group * rows * dv + r] - M);
            L += factor * l;
            const Scalar* acc = part + r * dv;
            for (Index c = 0; c < dv; ++c) merged[c] += factor * acc[c];
          }
          if (nan) L = std::numeric_limits<Scalar>::quiet_NaN();
          const Index hh = r / rows, i = r % rows;
          finish(b, g, g * group + hh, q0 + i, keys[static_cast<std::size_t>(i)], merged, M, L);
        }
      }
}

// The gradients of one tile: query rows q0 .. q0 + rows - 1 of head h against the n keys from k0, whose K^T and V^T
// are the first n columns of packed panels (depth d and dv, `stored` columns). Qs (rows, d): the rows' queries, times
// the scale when the rule is the scale alone (scale_only), then dS is left unscaled for dQ. On return, P (rows, n)
// holds the dropped weights P Z (for dV) and dS (rows, n) the gradient with respect to the products Qs.k (for dQ and
// dK), both 0 on a key the row does not see; false when no row of the tile has a weight. T: (rows, n) scratch for the
// softcap.
template <class Scalar>
bool gradient_tile(const Call<Scalar>& call, const Kernels<Scalar>& kernel, const Heads<const Scalar>& dO,
                   const Scalar* lse, const Scalar* deltas, Index b, Index h, Index q0, Index rows, Index k0, Index n,
                   const VisibleKeys* keys, const Scalar* Qs, const Scalar* KT, const Scalar* VT, Index stored,
                   Scalar* P, Scalar* dS, Scalar* T) {
  const Heads<const Scalar>& Q = call.queries;
  const Index nq = Q.length, H = Q.count, dv = call.values.dim;
  const bool scaled = call.rule.scale_only();
  constexpr Scalar none = -std::numeric_limits<Scalar>::infinity();
  kernel.packed_times_matrix(x_rows(Qs, Q.dim, rows), Q.dim, b_packed(KT, Q.dim, stored), n, y_into(P, n));
  kernel.packed_times_matrix(x_rows(dO.at(b, h, q0), dO.row_stride, rows), dv, b_packed(VT, dv, stored), n,
                             y_into(dS, n));
  bool any = false;
  for (Index i = 0; i < rows; ++i) {
    Scalar *p = P + i * n, *ds = dS + i * n, *t = T + i * n;
    const Index q = q0 + i;
    const Scalar row_lse = lse[(b * nq + q) * H + h];
    const auto [a, z] = keys[i].within(k0, n);
    if (a >= z || row_lse == none) {
      std::fill(p, p + n, Scalar(0));
      std::fill(ds, ds + n, Scalar(0));
      continue;
    }
    any = true;
    if (scaled)
      ScoreRule<Scalar>::hide(p, n, k0, a, z, keys[i]);
    else
      call.rule.apply(p, n, k0, a, z, keys[i], b, h, q, call.rule.has_softcap() ? t : nullptr);
    kernel.exp_shifted(p + a, z - a, row_lse);
    std::fill(p, p + a, Scalar(0));
    std::fill(p + z, p + n, Scalar(0));
    if (call.dropout.active()) call.dropout.apply(ds, n, b * H + h, q, k0);
    kernel.softmax_gradient_row(p, ds, n, deltas[(b * nq + q) * H + h]);
    if (call.rule.has_softcap())
      for (Index j = a; j < z; ++j) ds[j] *= Scalar(1) - t[j] * t[j];
    if (!scaled)
      for (Index j = a; j < z; ++j) ds[j] *= call.rule.scale;
    if (call.dropout.active()) call.dropout.apply(p, n, b * H + h, q, k0);
  }
  return any;
}

// Whether every entry of the (rows, columns) block at data, rows `stride` apart, is finite.
template <class Scalar>
bool finite_rows(const Scalar* data, Index stride, Index rows, Index columns) {
  return all_finite(
      Eigen::Map<const Matrix<Scalar>, 0, Eigen::OuterStride<>>(data, rows, columns, Eigen::OuterStride<>(stride)));
}

// How the backward pass splits a call: key block t of each (batch row, key/value head) belongs to split t mod splits,
// one piece of work per (b, g, split); splits from the shape alone (at least backward_items pieces when the blocks
// allow), so that the bits do not depend on the thread count.
struct BackwardPlan {
  Index key_blocks, splits;
};

inline BackwardPlan backward_plan(Index batch, Index kv_heads, Index num_keys) {
  const Index kb = tuning::core_backward_key_rows, blocks = (num_keys + kb - 1) / kb;
  const Index pairs = std::max(batch * kv_heads, Index(1));
  return {blocks, std::min(blocks, std::max(Index(1), (tuning::backward_items + pairs - 1) / pairs))};
}

// dQ, dK, dV (as Q, K, V) of the attention whose output O and lse (batch, Q, H) the forward pass gave, from dO.
//
// One pass: the piece (b, g, split) packs each of its key blocks' K^T, V^T and K once and runs every query block that
// sees one of the block's keys, for each head of the group, against it; it owns the block's rows of dK and dV, and
// adds dS K into its split's own dQ (split 0 into dQ, split s > 0 into a partial dQ of its own), summed in split
// order at the end.
template <class Scalar>
void backward(const Call<Scalar>& call, const Heads<const Scalar>& O, const Scalar* lse, const Heads<const Scalar>& dO,
              const Heads<Scalar>& dQ, const Heads<Scalar>& dK, const Heads<Scalar>& dV, Buffers<Scalar>& buffers) {
  const Heads<const Scalar>&Q = call.queries, &K = call.keys, &V = call.values;
  const Index B = Q.batch, nq = Q.length, nk = K.length, H = Q.count, G = K.count, d = Q.dim, dv = V.dim;
  const Index group = call.group();
  for (Index b = 0; b < B; ++b) {
    for (Index t = 0; t < nq; ++t)
      for (Index h = 0; h < H; ++h) std::fill(dQ.at(b, h, t), dQ.at(b, h, t) + d, Scalar(0));
    for (Index t = 0; t < nk; ++t)
      for (Index g = 0; g < G; ++g) {
        std::fill(dK.at(b, g, t), dK.at(b, g, t) + d, Scalar(0));
        std::fill(dV.at(b, g, t), dV.at(b, g, t) + dv, Scalar(0));
      }
  }
  if (B == 0 || nq == 0 || nk == 0 || H == 0) return;
  const Kernels<Scalar>& kernel = kernels<Scalar>();
  const Index qb = tuning::core_query_rows, kb = tuning::core_backward_key_rows;
  const Mask& mask = *call.mask;
  const bool uniform = mask.fully_masked() == FullyMasked::uniform;
  Buffers<Scalar>::grow(buffers.deltas, B * nq * H);
  Scalar* deltas = buffers.deltas.data();  // (batch, Q, H): rowsum(dO * O)
  for (Index b = 0; b < B; ++b)
    for (Index q = 0; q < nq; ++q)
      for (Index h = 0; h < H; ++h) {
        const Scalar *o = O.at(b, h, q), *g = dO.at(b, h, q);
        Scalar D = 0;
        for (Index c = 0; c < dv; ++c) D += o[c] * g[c];
        deltas[(b * nq + q) * H + h] = D;
      }
  // One thread's scratch: K^T (d, kb padded), V^T (dv, kb padded), K (kb, d padded), then P, dS and T (qb, kb), then
  // the key block's dK (kb, d) and dV (kb, dv) and a query block's Qs (qb, d), contiguous whatever the strides of the
  // heads views.
  const Index kt_size = d * padded_to_packets<Scalar>(kb), vt_size = dv * padded_to_packets<Scalar>(kb);
  const Index k_size = kb * padded_to_packets<Scalar>(d), tile = qb * kb;
  buffers.reserve(kt_size + vt_size + k_size + 3 * tile + kb * (d + dv) + qb * d, qb);
  // Scale-only rules multiply Q by the scale once per tile (gradient_tile's Qs); dQ takes the scale at the end.
  const Scalar query_scale = call.rule.scale_only() ? call.rule.scale : Scalar(1);
  const BackwardPlan plan = backward_plan(B, G, nk);
  const Index query_blocks = (nq + qb - 1) / qb;
  // The dQ of splits 1, 2, ...: (splits - 1, batch, H, Q, d). Allocated per call, not kept in the buffers, where it
  // would stay beside the next call's gradients (splits - 1 times Q's size).
  Vector<Scalar> partial(Vector<Scalar>::Zero((plan.splits - 1) * B * H * nq * d));
  Scalar* partial_dq = partial.data();
  const double work = static_cast<double>(B) * H * nq * nk * (3 * d + 2 * dv);

  parallel_for(B * G * plan.splits, work, [&](Index piece, int thread) {
    const Index split = piece % plan.splits, g = piece / plan.splits % G, b = piece / plan.splits / G;
    Scalar* scratch = buffers.scratch[static_cast<std::size_t>(thread)].data();
    Scalar *KT = scratch, *VT = KT + kt_size, *Kp = VT + vt_size, *P = Kp + k_size, *dS = P + tile, *T = dS + tile;
    Scalar *dKb = T + tile, *dVb = dKb + kb * d, *Qs = dVb + kb * dv;
    VisibleKeys* keys = buffers.rows[static_cast<std::size_t>(thread)].data();
    // Where head h's rows from q0 add dS K: dQ, or this split's partial dQ; and their stride.
    const auto dq_rows = [&](Index h, Index q0) -> std::pair<Scalar*, Index> {
      if (split == 0) return {dQ.at(b, h, q0), dQ.row_stride};
      return {partial_dq + (((split - 1) * B + b) * H + h) * nq * d + q0 * d, d};
    };
    for (Index t = split; t < plan.key_blocks; t += plan.splits) {
      const Index k0 = t * kb, n = std::min(kb, nk - k0);
      kernel.pack_panel(b_columns(K.at(b, g, k0), K.row_stride), d, n, KT);   // K^T (d, n)
      kernel.pack_panel(b_columns(V.at(b, g, k0), V.row_stride), dv, n, VT);  // V^T (dv, n)
      kernel.pack_panel(b_rows(K.at(b, g, k0), K.row_stride), n, d, Kp);      // K (n, d)
      const bool keys_finite = finite_rows(K.at(b, g, k0), K.row_stride, n, d);
      std::fill(dKb, dKb + n * d, Scalar(0));
      std::fill(dVb, dVb + n * dv, Scalar(0));
      for (Index qblock = 0; qblock < query_blocks; ++qblock) {
        const Index q0 = qblock * qb, rows = std::min(qb, nq - q0);
        const auto [first, last] = block_visible(mask, b, q0, rows, nq, nk, keys);
        if (uniform) {  // d2l's uniform rows: dV += w dO on every key, w = 1 / num_keys (dropped as the forward pass)
          const Scalar share = Scalar(1) / static_cast<Scalar>(nk);
          for (Index i = 0; i < rows; ++i) {
            if (!keys[i].none()) continue;
            for (Index hh = 0; hh < group; ++hh) {
              const Index h = g * group + hh;
              const Scalar* g_row = dO.at(b, h, q0 + i);
              for (Index j = 0; j < n; ++j) {
                Scalar w = share;
                if (call.dropout.active()) call.dropout.apply(&w, 1, b * H + h, q0 + i, k0 + j);
                Scalar* v = dVb + j * dv;
                for (Index c = 0; c < dv; ++c) v[c] += w * g_row[c];
              }
            }
          }
        }
        if (first >= k0 + n || last <= k0) continue;
        // The tile's columns: the block's keys from the micro-panel that holds the first one some row of the query
        // block sees, to the last, [k0 + c0, k0 + c0 + m); dQ reads only K's rows from that first key, [a0, end), so
        // a key no row sees never meets a product.
        const Index a0 = std::max(first, k0) - k0, end = std::min(last, k0 + n) - k0;
        const Index c0 = kernel.micro_panel_start(a0), m = end - c0;
        for (Index hh = 0; hh < group; ++hh) {
          const Index h = g * group + hh;
          for (Index i = 0; i < rows; ++i) {
            const Scalar* q = Q.at(b, h, q0 + i);
            for (Index c = 0; c < d; ++c) Qs[i * d + c] = query_scale * q[c];
          }
          if (!gradient_tile(call, kernel, dO, lse, deltas, b, h, q0, rows, k0 + c0, m, keys, Qs, KT + c0 * d,
                             VT + c0 * dv, n - c0, P, dS, T))
            continue;
          // A product whose right operand holds an inf or NaN goes term by term: a row's P and dS are 0 on the keys
          // it does not see, and 0 times inf would make NaN a gradient that does not depend on that entry.
          const Scalar* dOb = dO.at(b, h, q0);  // (rows, dv), rows dO.row_stride apart
          if (finite_rows(dOb, dO.row_stride, rows, dv))
            kernel.times_matrix(x_columns(P, m, m), rows, b_rows(dOb, dO.row_stride), dv, y_added(dVb + c0 * dv, dv));
          else
            add_nonzero_terms(kernel, P, Index(1), m, m, rows, dOb, dO.row_stride, dv, dVb + c0 * dv, dv);
          if (finite_rows(Qs, d, rows, d))
            kernel.times_matrix(x_columns(dS, m, m), rows, b_rows(Qs, d), d, y_added(dKb + c0 * d, d));
          else
            add_nonzero_terms(kernel, dS, Index(1), m, m, rows, Qs, d, d, dKb + c0 * d, d);
          const auto [dq, ldq] = dq_rows(h, q0);
          if (keys_finite)
            kernel.packed_times_matrix(x_rows(dS + (a0 - c0), m, rows), end - a0, b_packed(Kp, n, d, a0), d,
                                       y_added(dq, ldq));
          else
            add_nonzero_terms(kernel, dS + (a0 - c0), m, Index(1), rows, end - a0, K.at(b, g, k0 + a0), K.row_stride, d,
                              dq, ldq);
        }
      }
      for (Index j = 0; j < n; ++j) {
        std::copy(dKb + j * d, dKb + (j + 1) * d, dK.at(b, g, k0 + j));
        std::copy(dVb + j * dv, dVb + (j + 1) * dv, dV.at(b, g, k0 + j));
      }
    }
  });
  if (plan.splits == 1 && query_scale == Scalar(1)) return;
  // dQ = (dQ + the partial dQ of splits 1, 2, ..., in that order) times query_scale.
  parallel_for(B * H, static_cast<double>(plan.splits) * B * H * nq * d, [&](Index pair, int) {
    const Index b = pair / H, h = pair % H;
    for (Index s = 1; s < plan.splits; ++s) {
      const Scalar* part = partial_dq + (((s - 1) * B + b) * H + h) * nq * d;
      for (Index q = 0; q < nq; ++q) {
        Scalar* row = dQ.at(b, h, q);
        for (Index c = 0; c < d; ++c) row[c] += part[q * d + c];
      }
    }
    if (query_scale != Scalar(1))
      for (Index q = 0; q < nq; ++q) {
        Scalar* row = dQ.at(b, h, q);
        for (Index c = 0; c < d; ++c) row[c] *= query_scale;
      }
  });
}

}  // namespace core
}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
