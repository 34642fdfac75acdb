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

#include <attend/config.hpp>

#include <attend/detail/kernels.hpp>
#include <attend/detail/tuning.hpp>
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
inline namespace ATTEND_ABI {
namespace detail {

// Heads too small for Eigen's products (tuning::tiny_product): Eigen's GEMM costs more to set up than to run there,
// and its coefficient-based products and row expressions peel a scalar prologue to reach an aligned address (a head's
// rows rarely start on one). The scores go through the level's tiny_scores (detail/kernels/heads-inl.hpp), the
// weights times the values through its row kernel on the value rows as they are: unaligned packets, a scalar tail.

// output = weights @ values on the level's row kernel, where a key the mask hides from a row is never read for that
// row: its weight is exactly 0 and, normally, 0 * value = 0 adds nothing, but 0 * NaN and 0 * inf are NaN. So when
// the values hold a non-finite number (checked in O(keys * value_dim), against the product's
// O(queries * keys * value_dim)), each row sums over its visible keys only, one multiply-add of the row kernel per
// key: the chain the whole product makes, less the keys of weight 0, so a row that sees only finite values gets the
// bits it gets when every value is finite. A row that sees no key follows its rule (uniform: the mean of every value
// row, d2l's result; zero: 0). weights: (queries, keys); values: (keys, value_dim); output: (queries, value_dim),
// all row-major with contiguous rows.
template <class Weights, class Values, class Output>
void weights_times_values(const Eigen::MatrixBase<Weights>& weights, const Mask& mask, Index b,
                          const Eigen::MatrixBase<Values>& values, Eigen::MatrixBase<Output>& output,
                          const Kernels<typename Weights::Scalar>& kernel) {
  static_assert(Weights::IsRowMajor && Values::IsRowMajor && Output::IsRowMajor, "rows must be contiguous");
  const Weights& w = weights.derived();
  const Values& v = values.derived();
  Output& out = output.derived();
  const Index num_queries = w.rows(), num_keys = w.cols(), dv = out.cols();
  if (mask.empty() || all_finite(values)) {
    kernel.rows_times_matrix(false, w.data(), w.outerStride(), num_queries, num_keys, v.data(), v.outerStride(), dv,
                             false, nullptr, out.data(), out.outerStride());
    return;
  }
  for (Index i = 0; i < num_queries; ++i) {
    const Index prefix = std::min(mask.visible_prefix(b, i, num_queries, num_keys), num_keys);
    const bool* keep = mask.keep_row(b, i);
    bool sees_a_key = false;
    out.row(i).setZero();
    for (Index j = 0; j < prefix; ++j) {
      if (keep != nullptr && !keep[j]) continue;
      sees_a_key = true;
      kernel.rows_times_matrix(true, w.data() + i * w.outerStride() + j, 1, 1, 1, v.data() + j * v.outerStride(),
                               v.outerStride(), dv, false, nullptr, out.data() + i * out.outerStride(),
                               out.outerStride());
    }
    if (!sees_a_key && mask.fully_masked() == FullyMasked::uniform)
      kernel.rows_times_matrix(false, w.data() + i * w.outerStride(), 1, 1, num_keys, v.data(), v.outerStride(), dv,
                               false, nullptr, out.data() + i * out.outerStride(), out.outerStride());
  }
}

// scores: (queries, keys), row-major, in place -> weights
// values: (keys, value_dim); output: (queries, value_dim)
// generator: null when dropout is off (evaluation mode or p = 0).
template <class Scalar, class Scores, class Values, class Output>
void attend_rows(Eigen::MatrixBase<Scores>& scores, const Mask& mask, Index b, const Eigen::MatrixBase<Values>& values,
                 Eigen::MatrixBase<Output>& output, Scalar dropout, Generator* generator) {
  const Kernels<Scalar>& kernel = kernels<Scalar>();
  masked_softmax_block(scores, mask, b);
  if (generator == nullptr) {
    weights_times_values(scores, mask, b, values, output, kernel);
  } else {
    Matrix<Scalar> dropped = scores;  // (queries, keys)
    dropout_inplace(dropped, dropout, *generator);
    weights_times_values(dropped, mask, b, values, output, kernel);
  }
}

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
  const Kernels<Scalar>& kernel = kernels<Scalar>();  // before the parallel region: it may throw
  // One (batch row, head) pair: its own slice of the weights and its own columns of the output.
  const auto pair = [&](Index bh) {
    const Index b = bh / num_heads, h = bh % num_heads;
    const auto Qh = Q.block(b * num_queries, h * d, num_queries, d);    // (queries, d), a strided view
    const auto Kh = K.block(b * num_keys, h * d, num_keys, d);          // (keys, d)
    const auto Vh = V.block(b * num_keys, h * dv, num_keys, dv);        // (keys, dv)
    auto scores = slice(weights, bh);                                   // (queries, keys)
    auto out = output.block(b * num_queries, h * dv, num_queries, dv);  // (queries, dv)
    if (num_queries * num_keys * d <= tuning::tiny_product) {  // Eigen's GEMM costs more to set up than to run
      kernel.tiny_scores(Qh.data(), Qh.outerStride(), Kh.data(), Kh.outerStride(), num_queries, num_keys, d, scale,
                         scores.data(), scores.outerStride());
    } else {
      scores.noalias() = scale * (Qh * Kh.transpose());
    }
    kernel.masked_softmax_block(scores.data(), num_queries, num_keys, scores.outerStride(), mask, b);
    if (generator != nullptr) {
      Matrix<Scalar> dropped = scores;  // (queries, keys); the kept weights are those before dropout
      dropout_inplace(dropped, dropout, *generator);
      weights_times_values(dropped, mask, b, Vh, out, kernel);
    } else {
      weights_times_values(scores, mask, b, Vh, out, kernel);
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
}  // namespace ATTEND_ABI
}  // namespace attend
