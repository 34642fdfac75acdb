// attend/dropout.hpp — inverted dropout, as torch.nn.Dropout in training mode.
//
// Each entry is kept with probability 1 - p and then scaled by 1 / (1 - p), so the expected value is unchanged;
// p = 1 zeroes everything, p = 0 changes nothing. The mask comes from the Generator, entry by entry in memory order.
#pragma once

#include <attend/config.hpp>

#include <attend/random.hpp>
#include <attend/tensor.hpp>

#include <algorithm>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

// X: any dense Eigen expression that can be written, in place.
template <class Derived, class Scalar>
void dropout_inplace(Eigen::DenseBase<Derived>& X, Scalar p, Generator& generator) {
  if (p == Scalar(0)) return;
  if (p == Scalar(1)) {
    X.setZero();
    return;
  }
  const Scalar keep_scale = Scalar(1) / (Scalar(1) - p);
  for (Index i = 0; i < X.rows(); ++i)
    for (Index j = 0; j < X.cols(); ++j) {
      Scalar& x = X.derived().coeffRef(i, j);
      x = generator.uniform01<Scalar>() < p ? Scalar(0) : x * keep_scale;
    }
}

// The factors alone, for n entries: 0 (dropped, with probability p) or 1 / (1 - p), from the same draws as
// dropout_inplace; 1 everywhere when p = 0 and 0 when p = 1 (no draw).
template <class Scalar>
void dropout_factors(Scalar* factors, Index n, Scalar p, Generator& generator) {
  if (p == Scalar(0) || p == Scalar(1)) {
    std::fill(factors, factors + n, p == Scalar(0) ? Scalar(1) : Scalar(0));
    return;
  }
  const Scalar keep_scale = Scalar(1) / (Scalar(1) - p);
  for (Index i = 0; i < n; ++i) factors[i] = generator.uniform01<Scalar>() < p ? Scalar(0) : keep_scale;
}

// The same, writing each entry's factor into `factors` (X's size, in X's memory order; X contiguous): 0 for a dropped
// entry, 1 / (1 - p) for a kept one, 1 everywhere when p = 0. The same draws and the same X as dropout_inplace:
// the factors are the derivative of the result with respect to X, for a backward pass.
template <class Derived, class Scalar>
void dropout_inplace(Eigen::DenseBase<Derived>& X, Scalar p, Generator& generator, Scalar* factors) {
  const Index n = X.size();
  Scalar* x = X.derived().data();
  dropout_factors(factors, n, p, generator);
  if (p == Scalar(0)) return;
  for (Index i = 0; i < n; ++i) x[i] = factors[i] == Scalar(0) ? Scalar(0) : x[i] * factors[i];
}

}  // namespace detail

// X: any shape -> same shape; entries zeroed with probability p, the rest scaled by 1 / (1 - p).
template <class Scalar>
Tensor3<Scalar> dropout(const Tensor3<Scalar>& X, Scalar p, Generator& generator) {
  detail::require_probability(p, "dropout");
  Tensor3<Scalar> Y = X;  // same shape as X
  auto flat = detail::as_matrix(Y);
  detail::dropout_inplace(flat, p, generator);
  return Y;
}

}  // namespace ATTEND_ABI
}  // namespace attend
