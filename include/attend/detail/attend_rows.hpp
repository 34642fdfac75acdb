// attend/detail/attend_rows.hpp — the work shared by every attention: weights from scores, then values.
//
// For one (batch row, head) pair, given its scores (queries, keys) and the mask of its batch row:
//   1. masked softmax of every row, in place: the scores become the attention weights, kept for the caller
//      (a query that sees no key gets the mask's FullyMasked rule: uniform weights, or a zero row and so a zero
//      output row);
//   2. output = dropout(weights) @ values — dropout only in training, on a copy, so the kept weights are
//      those before dropout, as in d2l.
// And scaled_dot_product_heads(), which runs this over every (batch row, head) of projected Q, K, V read through
// strided column blocks: head h of batch row b is rows b*steps .. of columns h*d .. h*d + d - 1, so no head is
// ever copied out (the layout transpose_qkv would build).
#pragma once

#include <attend/detail/rows_times_matrix.hpp>
#include <attend/dropout.hpp>
#include <attend/mask.hpp>
#include <attend/masked_softmax.hpp>
#include <attend/random.hpp>
#include <attend/tensor.hpp>
#include <attend/threads.hpp>

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace attend {
namespace detail {

// Heads too small for Eigen's products (see tiny_product): Eigen's GEMM costs more to set up than to run there, and
// its coefficient-based products and row expressions peel a scalar prologue to reach an aligned address (a head's
// rows rarely start on one). The scores go through dot_tiny below, the weights times the values through
// rows_times_matrix (detail/rows_times_matrix.hpp) on the value rows as they are: unaligned packets, a scalar tail.

// sum_i a[i] b[i] over n entries: packets, then the n % size tail (for floats in packets of 8 or 16, one more packet
// under a mask of lanes, which Eigen 3.4 loads for those: a head of 20 then has no chain of scalar multiply-adds).
template <class Scalar>
Scalar dot_tiny(const Scalar* a, const Scalar* b, Index n) {
  namespace ei = Eigen::internal;
  using Packet = typename ei::packet_traits<Scalar>::type;
  constexpr Index size = ei::packet_traits<Scalar>::size;
  Packet sum = ei::pset1<Packet>(Scalar(0));
  Index i = 0;
  for (; i + size <= n; i += size) sum = ei::pmadd(ei::ploadu<Packet>(a + i), ei::ploadu<Packet>(b + i), sum);
  if constexpr (std::is_same<Scalar, float>::value && (size == 8 || size == 16)) {
    if (i < n) {
      using Lanes = std::conditional_t<size == 16, std::uint16_t, std::uint8_t>;
      const auto used = static_cast<Lanes>((1u << (n - i)) - 1u);  // lanes past n read as 0
      sum = ei::pmadd(ei::ploadu<Packet>(a + i, used), ei::ploadu<Packet>(b + i, used), sum);
    }
    return ei::predux(sum);
  }
  Scalar total = ei::predux(sum);
  for (; i < n; ++i) total += a[i] * b[i];
  return total;
}

// output = weights @ values, where a key the mask hides from a row is never read for that row: its weight is exactly
// 0 and, normally, 0 * value = 0 adds nothing, but 0 * NaN and 0 * inf are NaN. So when the values hold a non-finite
// number (checked in O(keys * value_dim), against the product's O(queries * keys * value_dim)), each row sums over its
// visible keys only; a row that sees no key follows its rule (uniform: the mean of every value row, d2l's result;
// zero: 0). weights: (queries, keys); values: (keys, value_dim); output: (queries, value_dim).
template <class Weights, class Values, class Output>
void weights_times_values(const Eigen::MatrixBase<Weights>& weights, const Mask& mask, Index b,
                          const Eigen::MatrixBase<Values>& values, Eigen::MatrixBase<Output>& output, bool tiny) {
  if (mask.empty() || all_finite(values)) {
    if (tiny) {
      static_assert(Weights::IsRowMajor && Values::IsRowMajor && Output::IsRowMajor, "rows must be contiguous");
      const Weights& w = weights.derived();
      const Values& v = values.derived();
      Output& out = output.derived();
      rows_times_matrix<false, typename Weights::Scalar>(w.data(), w.outerStride(), w.rows(), w.cols(), v.data(),
                                                         v.outerStride(), out.cols(), false, nullptr, out.data(),
                                                         out.outerStride());
    } else {
      output.noalias() = weights * values;
    }
    return;
  }
  const Index num_queries = weights.rows(), num_keys = weights.cols();
  for (Index i = 0; i < num_queries; ++i) {
    const Index prefix = std::min(mask.visible_prefix(b, i, num_queries, num_keys), num_keys);
    const bool* keep = mask.keep_row(b, i);
    bool sees_a_key = false;
    output.row(i).setZero();
    for (Index j = 0; j < prefix; ++j) {
      if (keep != nullptr && !keep[j]) continue;
      sees_a_key = true;
      output.row(i) += weights(i, j) * values.row(j);
    }
    if (!sees_a_key && mask.fully_masked() == FullyMasked::uniform) output.row(i).noalias() = weights.row(i) * values;
  }
}

// scores: (queries, keys), row-major, in place -> weights
// values: (keys, value_dim); output: (queries, value_dim)
// generator: null when dropout is off (evaluation mode or p = 0).
template <class Scalar, class Scores, class Values, class Output>
void attend_rows(Eigen::MatrixBase<Scores>& scores, const Mask& mask, Index b, const Eigen::MatrixBase<Values>& values,
                 Eigen::MatrixBase<Output>& output, Scalar dropout, Generator* generator) {
  masked_softmax_block(scores, mask, b);
  if (generator == nullptr) {
    weights_times_values(scores, mask, b, values, output, false);
  } else {
    Matrix<Scalar> dropped = scores;  // (queries, keys)
    dropout_inplace(dropped, dropout, *generator);
    weights_times_values(dropped, mask, b, values, output, false);
  }
}

// Below this many multiply-adds (queries * keys * d) a head's products are evaluated coefficient by coefficient.
constexpr Index tiny_product = 16 * 16 * 32;

// Scaled dot-product attention for every batch row and head, on projected rows:
//   Q: (batch * num_queries, num_heads * d)   K: (batch * num_keys, num_heads * d)
//   V: (batch * num_keys, num_heads * dv)     output: (batch * num_queries, num_heads * dv)
//   weights: (batch * num_heads, num_queries, num_keys), filled; row b * num_heads + h is head h of batch row b.
// The mask is indexed by batch row (shape checked by the caller); each head reuses its batch row's mask, as d2l's
// repeat_interleave does for valid lengths.
template <class Scalar>
void scaled_dot_product_heads(const Eigen::Ref<const Matrix<Scalar>>& Q, const Eigen::Ref<const Matrix<Scalar>>& K,
                              const Eigen::Ref<const Matrix<Scalar>>& V, Index batch, Index num_queries, Index num_keys,
                              Index num_heads, const Mask& mask, Tensor3<Scalar>& weights,
                              Eigen::Ref<Matrix<Scalar>> output, Scalar dropout, Generator* generator) {
  const Index d = Q.cols() / num_heads, dv = V.cols() / num_heads;
  const Scalar scale = Scalar(1) / std::sqrt(static_cast<Scalar>(d));
  weights.resize(batch * num_heads, num_queries, num_keys);
  if (weights.size() == 0) {  // no query, or no key: a sum over no keys; and no view of an empty buffer is taken
    output.setZero();
    return;
  }
  // One (batch row, head) pair: its own slice of the weights and its own columns of the output.
  const auto pair = [&](Index bh) {
    const Index b = bh / num_heads, h = bh % num_heads;
    const auto Qh = Q.block(b * num_queries, h * d, num_queries, d);    // (queries, d), a strided view
    const auto Kh = K.block(b * num_keys, h * d, num_keys, d);          // (keys, d)
    const auto Vh = V.block(b * num_keys, h * dv, num_keys, dv);        // (keys, dv)
    auto scores = slice(weights, bh);                                   // (queries, keys)
    auto out = output.block(b * num_queries, h * dv, num_queries, dv);  // (queries, dv)
    if (num_queries * num_keys * d <= tiny_product) {  // Eigen's GEMM costs more to set up than to run
      for (Index i = 0; i < num_queries; ++i)
        for (Index j = 0; j < num_keys; ++j)
          scores(i, j) = scale * dot_tiny(Qh.data() + i * Qh.outerStride(), Kh.data() + j * Kh.outerStride(), d);
    } else {
      scores.noalias() = scale * (Qh * Kh.transpose());
    }
    masked_softmax_block(scores, mask, b);
    const bool tiny = num_queries * num_keys * dv <= tiny_product;
    if (generator != nullptr) {
      Matrix<Scalar> dropped = scores;  // (queries, keys); the kept weights are those before dropout
      dropout_inplace(dropped, dropout, *generator);
      weights_times_values(dropped, mask, b, Vh, out, tiny);
    } else {
      weights_times_values(scores, mask, b, Vh, out, tiny);
    }
  };
  // Dropout draws from one generator in (batch row, head) order: serial. Otherwise the pairs are independent, each
  // computed by one thread whatever their number.
  if (generator != nullptr) {
    for (Index bh = 0; bh < batch * num_heads; ++bh) pair(bh);
  } else {
    const double pair_work = static_cast<double>(num_queries) * static_cast<double>(num_keys);  // times a width
    parallel_for(batch * num_heads, pair_work * static_cast<double>(std::max(d, dv)),
                 pair_work * static_cast<double>(batch * num_heads * (d + dv)), [&](Index bh, int) { pair(bh); });
  }
}

}  // namespace detail
}  // namespace attend
