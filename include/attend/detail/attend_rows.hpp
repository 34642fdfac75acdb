// attend/detail/attend_rows.hpp — the work shared by every attention: weights from scores, then values.
//
// For one (batch row, head) pair, given its scores (queries, keys) and the mask of its batch row:
//   1. masked softmax of every row, in place: the scores become the attention weights, kept for the caller
//      (a query that sees no key gets the mask's FullyMasked rule: uniform weights, or a zero row and so a zero
//      output row);
//   2. output = dropout(weights) @ values — dropout only in training, on a copy, so the kept weights are
//      those before dropout, as in d2l. scaled_dot_product_heads' dropout is detail/attention_dropout.hpp's, a pure
//      function of (seed, pair, query, key) that its backward pass regenerates.
// And scaled_dot_product_heads(), which runs this over every (batch row, head) of projected Q, K, V read in place
// through a view of their heads (detail/heads.hpp).
#pragma once

#include <attend/config.hpp>

#include <attend/detail/attention_dropout.hpp>
#include <attend/detail/heads.hpp>
#include <attend/detail/kernels.hpp>
#include <attend/detail/mask_row.hpp>
#include <attend/detail/packet_buffer.hpp>
#include <attend/detail/softmax.hpp>
#include <attend/detail/tuning.hpp>
#include <attend/mask.hpp>
#include <attend/tensor.hpp>
#include <attend/threads.hpp>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

// Every product here runs on the active level's kernels. A head's scores: for a head of at most
// tuning::tiny_product multiply-adds, one dot product per score (the level's tiny_scores,
// detail/kernels/heads-inl.hpp), which for so little work beats copying K_h^T for the row kernel, itself faster
// above it. The weights times the values: the row kernel on the value rows as they are (unaligned packets, a masked
// last packet), or on a copy packed once for all of a head's blocks of queries (scaled_dot_product_heads).

// output = weights @ values on the level's row kernel, where a key the mask hides from a row is never read for that
// row: its weight is exactly 0 and, normally, 0 * value = 0 adds nothing, but 0 * NaN and 0 * inf are NaN. The product
// runs over the keys some row's weights reach (a causal block's keys up to its last query's), and when
// the values hold a non-finite number (checked in O(keys * value_dim), against the product's
// O(queries * keys * value_dim)), each row sums over its visible keys only, one multiply-add of the row kernel per
// key: the chain the whole product makes, less the keys of weight 0, so a row that sees only finite values gets the
// bits it gets when every value is finite. A row that sees no key follows its rule (uniform: the mean of every value
// row, d2l's result; zero: 0). weights: (rows, keys), rows q0 .. q0 + rows - 1 of the batch row's num_queries
// (all of them by default); values: (keys, value_dim); output: (rows, value_dim), all row-major with contiguous rows.
// values_finite: whether every value is finite, when the caller knows (it checks once for many blocks of rows).
// packed_values: the values as pack_panel packed them (keys, value_dim), for the whole product, when the caller packed
// them once for many blocks of rows; null: they are read as they are.
template <class Weights, class Values, class Output>
void weights_times_values(const Eigen::MatrixBase<Weights>& weights, const Mask& mask, Index b,
                          const Eigen::MatrixBase<Values>& values, Eigen::MatrixBase<Output>& output,
                          const Kernels<typename Weights::Scalar>& kernel, Index q0 = 0, Index num_queries = -1,
                          const bool* values_finite = nullptr,
                          const typename Weights::Scalar* packed_values = nullptr) {
  static_assert(Weights::IsRowMajor && Values::IsRowMajor && Output::IsRowMajor, "rows must be contiguous");
  const Weights& w = weights.derived();
  const Values& v = values.derived();
  Output& out = output.derived();
  using Scalar = typename Weights::Scalar;
  const Index rows = w.rows(), num_keys = w.cols(), dv = out.cols();
  if (num_queries < 0) num_queries = rows;
  if (mask.empty() || (values_finite != nullptr ? *values_finite : all_finite(values))) {
    // over the keys the rows' weights reach (detail/mask_row.hpp)
    const BlockKeys block = block_keys(mask, b, q0, rows, num_queries, num_keys);
    const Index first = block.weighted_first(), last = block.weighted_last(num_keys);
    if (packed_values != nullptr) {
      kernel.packed_times_matrix(x_rows(w.data() + first, w.outerStride(), rows), last - first,
                                 b_packed(packed_values, num_keys, dv, first), dv,
                                 y_into(out.data(), out.outerStride()));
    } else {
      kernel.times_matrix(x_rows(w.data() + first, w.outerStride(), rows), last - first,
                          b_rows(v.data() + first * v.outerStride(), v.outerStride()), dv,
                          y_into(out.data(), out.outerStride()));
    }
    return;
  }
  for (Index i = 0; i < rows; ++i) {
    const VisibleKeys keys = mask.visible_keys(b, q0 + i, num_queries, num_keys);
    Scalar* out_row = out.data() + i * out.outerStride();  // (dv)
    out.row(i).setZero();
    keys.for_each(0, num_keys, [&](Index j) {
      kernel.times_matrix(x_rows(w.data() + i * w.outerStride() + j, 1, 1), 1,
                          b_rows(v.data() + j * v.outerStride(), v.outerStride()), dv,
                          y_added(out_row, out.outerStride()));
    });
    if (keys.none() && mask.fully_masked() == FullyMasked::uniform)
      kernel.times_matrix(x_rows(w.data() + i * w.outerStride(), 1, 1), num_keys, b_rows(v.data(), v.outerStride()), dv,
                          y_into(out_row, out.outerStride()));
  }
}

// scores: (queries, keys), row-major, in place -> weights
// values: (keys, value_dim); output: (queries, value_dim)
// dropout: on the weights that multiply the values, its pair b.
template <class Scores, class Values, class Output>
void attend_rows(Eigen::MatrixBase<Scores>& scores, const Mask& mask, Index b, const Eigen::MatrixBase<Values>& values,
                 Eigen::MatrixBase<Output>& output, const AttentionDropout& dropout) {
  using Scalar = typename Scores::Scalar;
  const Kernels<Scalar>& kernel = kernels<Scalar>();
  masked_softmax_block(scores, mask, b);
  if (!dropout.active()) {
    weights_times_values(scores, mask, b, values, output, kernel);
  } else {
    Matrix<Scalar> dropped = scores;  // (queries, keys)
    for (Index i = 0; i < dropped.rows(); ++i)
      dropout.apply(dropped.data() + i * dropped.cols(), dropped.cols(), b, i, Index(0));
    weights_times_values(dropped, mask, b, values, output, kernel);
  }
}

// The direct path's scratch (scaled_dot_product_heads): K_g^T and V_g packed, one panel per key/value pair; whether
// each V_g is all finite; each thread's dropped weights. Each buffer grows only: a caller that keeps it between calls
// of one shape allocates nothing.
template <class Scalar>
struct DirectBuffers {
  PacketBuffer<Scalar> packed_keys, packed_values;
  std::vector<char> values_finite;
  std::vector<Matrix<Scalar>> dropped;
};

// Scaled dot-product attention for every batch row and query head (detail/heads.hpp), on projected rows:
//   Q: (batch, num_queries) steps of Q.count heads of d    K: (batch, num_keys) steps of K.count heads of d
//   V: (batch, num_keys) steps of K.count heads of dv       output: as Q, with heads of dv
//   weights: (batch * Q.count, num_queries, num_keys), filled; row b * Q.count + h is head h of batch row b.
//   dropout: on the weights that multiply the values (those kept are before it), its pair b * Q.count + h.
// Query head h reads key/value head h / (Q.count / K.count). The mask is indexed by batch row (shape checked by the
// caller); each head reuses its batch row's mask, as d2l's repeat_interleave does for valid lengths.
// Work items: (pair, block of tuning::direct_block_rows queries), each its own rows of the weights and the output, so
// a single head still gives every thread work; a row's bits do not depend on the block it falls in.
// buffers: the scratch below, kept by the caller between calls (AttentionWorkspace::direct) so that a repeated call of
// one shape allocates nothing; null: the call's own.
template <class Scalar>
void scaled_dot_product_heads(const Heads<const Scalar>& Q, const Heads<const Scalar>& K, const Heads<const Scalar>& V,
                              const Mask& mask, Tensor3<Scalar>& weights, const Heads<Scalar>& output,
                              const AttentionDropout& dropout = {}, DirectBuffers<Scalar>* buffers = nullptr) {
  eigen_assert(K.count >= 1 && Q.count % K.count == 0 && V.count == K.count && output.count == Q.count);
  eigen_assert(Q.batch == K.batch && V.batch == K.batch && output.batch == Q.batch && V.length == K.length);
  eigen_assert(Q.dim == K.dim && output.dim == V.dim && output.length == Q.length);
  const Index batch = Q.batch, num_queries = Q.length, num_keys = K.length, num_heads = Q.count;
  const Index kv_heads = K.count, group = num_heads / kv_heads;  // query heads per key/value head
  const Index d = Q.dim, dv = V.dim;
  const Scalar scale = Scalar(1) / std::sqrt(static_cast<Scalar>(d));
  weights.resize(batch * num_heads, num_queries, num_keys);
  if (weights.size() == 0) {  // no query, or no key: a sum over no keys; and no view of an empty buffer is taken
    for (Index b = 0; num_queries > 0 && b < batch; ++b)
      for (Index h = 0; h < num_heads; ++h) output.head(b, h).setZero();
    return;
  }
  const Kernels<Scalar>& kernel = kernels<Scalar>();  // before the parallel region: it may throw
  // Heads above tuning::tiny_product: the scores on the row kernel, Q_h times K_g^T, K_g^T packed once (pack_panel)
  // before the query blocks that read it; and V_g too when the blocks have tuning::packed_product_rows rows, the
  // products that pack their right-hand operand. With dropout, the dropped weights of a block in a buffer of each
  // thread. Allocated here: no allocation inside the parallel region.
  const bool tiny = num_queries * num_keys * d <= tuning::tiny_product;
  const Index kv_pairs = batch * kv_heads;
  const Index block_rows = std::min(tuning::direct_block_rows, num_queries);
  const Index blocks = (num_queries + block_rows - 1) / block_rows;
  const bool pack_values = !tiny && block_rows >= tuning::packed_product_rows;
  const Index keys_panel = d * padded_to_packets<Scalar>(num_keys);     // K_g^T packed: (d, keys)
  const Index values_panel = num_keys * padded_to_packets<Scalar>(dv);  // V_g packed: (keys, dv)
  DirectBuffers<Scalar> own;
  DirectBuffers<Scalar>& scratch = buffers != nullptr ? *buffers : own;
  PacketBuffer<Scalar>&packed_keys = scratch.packed_keys, &packed_values = scratch.packed_values;
  if (!tiny) packed_keys.resize(kv_pairs * keys_panel);
  if (pack_values) packed_values.resize(kv_pairs * values_panel);
  std::vector<Matrix<Scalar>>& dropped = scratch.dropped;  // (block rows, keys) per thread
  if (dropout.active()) {
    dropped.resize(static_cast<std::size_t>(num_threads()));
    for (Matrix<Scalar>& P : dropped) P.resize(block_rows, num_keys);
  }
  // Per key/value head, before its query blocks: K_g^T and V_g packed, and whether V_g is all finite
  // (weights_times_values).
  std::vector<char>& values_finite = scratch.values_finite;  // (kv_pairs), 1 or 0: a byte each, written in parallel
  values_finite.resize(static_cast<std::size_t>(kv_pairs));
  parallel_for(kv_pairs, static_cast<double>(kv_pairs * num_keys * (d + dv)), [&](Index kv_pair, int) {
    const Index b = kv_pair / kv_heads, g = kv_pair % kv_heads;
    const auto Kg = K.head(b, g), Vg = V.head(b, g);  // (keys, d), (keys, dv)
    values_finite[static_cast<std::size_t>(kv_pair)] = mask.empty() || all_finite(Vg);
    if (!tiny)
      kernel.pack_panel(b_columns(Kg.data(), Kg.outerStride()), d, num_keys, packed_keys.data() + kv_pair * keys_panel);
    if (pack_values)
      kernel.pack_panel(b_rows(Vg.data(), Vg.outerStride()), num_keys, dv,
                        packed_values.data() + kv_pair * values_panel);
  });
  parallel_for(batch * num_heads * blocks, static_cast<double>(weights.size()) * static_cast<double>(d + dv),
               [&](Index item, int thread) {
    const Index bh = item / blocks, q0 = item % blocks * block_rows, rows = std::min(block_rows, num_queries - q0);
    const Index b = bh / num_heads, h = bh % num_heads, kv_pair = b * kv_heads + h / group;
    const auto Qh = Q.head(b, h).middleRows(q0, rows);   // (rows, d), a strided view
    const auto Kh = K.head(b, h / group);                // (keys, d)
    const auto Vh = V.head(b, h / group);                // (keys, dv)
    auto scores = slice(weights, bh).middleRows(q0, rows);  // (rows, keys)
    auto out = output.head(b, h).middleRows(q0, rows);   // (rows, dv)
    VisibleKeys keys[tuning::direct_block_rows];         // (rows): each row's visible keys, resolved once here
    for (Index i = 0; i < rows; ++i) keys[i] = mask.visible_keys(b, q0 + i, num_queries, num_keys);
    if (tiny) {  // scaled here
      kernel.tiny_scores(Qh.data(), Qh.outerStride(), Kh.data(), Kh.outerStride(), rows, num_keys, d, scale,
                         scores.data(), scores.outerStride());
    } else {  // Q_h K_g^T, scaled by the softmax's first pass over each row, as d2l's bmm(Q, K^T) / sqrt(d)
      // Only the scores of keys some row sees, from the micro-panel of K^T that holds the first of them on; the
      // softmax writes the masked score over the others before it reads a row.
      const BlockKeys block = block_keys(rows, num_keys, mask.fully_masked(), [&](Index i) { return keys[i]; });
      const Index first = kernel.micro_panel_start(block.first);
      kernel.packed_times_matrix(x_rows(Qh.data(), Qh.outerStride(), rows), d,
                                 b_packed(packed_keys.data() + kv_pair * keys_panel + first * d, d, num_keys - first),
                                 block.last - first, y_into(scores.data() + first, scores.outerStride()));
    }
    kernel.masked_softmax_block(scores.data(), rows, num_keys, scores.outerStride(), keys, mask.fully_masked(),
                                tiny ? Scalar(1) : scale);
    const bool finite_values = values_finite[static_cast<std::size_t>(kv_pair)] != 0;
    const bool* finite = &finite_values;
    const Scalar* Vp = pack_values ? packed_values.data() + kv_pair * values_panel : nullptr;
    if (dropout.active()) {
      auto P = dropped[static_cast<std::size_t>(thread)].topRows(rows);  // (rows, keys); the kept weights stay
      P = scores;
      for (Index i = 0; i < rows; ++i) dropout.apply(P.data() + i * num_keys, num_keys, bh, q0 + i, Index(0));
      weights_times_values(P, mask, b, Vh, out, kernel, q0, num_queries, finite, Vp);
    } else {
      weights_times_values(scores, mask, b, Vh, out, kernel, q0, num_queries, finite, Vp);
    }
  });
}

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
