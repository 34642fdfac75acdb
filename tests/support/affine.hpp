// Projection tests' helpers: a random matrix from a seed, and Y = X W^T + b by its definition.
#pragma once

#include <attend/random.hpp>
#include <attend/tensor.hpp>

#include <cstdint>

namespace attend_test {

// A (rows, cols) matrix of uniform values in [-1, 1), from a Generator of its own.
template <class Scalar>
attend::Matrix<Scalar> random_matrix(attend::Index rows, attend::Index cols, std::uint64_t seed) {
  attend::Generator generator(seed);
  attend::Matrix<Scalar> M(rows, cols);  // (rows, cols)
  for (attend::Index i = 0; i < M.size(); ++i) M.data()[i] = generator.uniform(Scalar(-1), Scalar(1));
  return M;
}

// The definition, with explicit loops in double: Y[r, o] = sum_k X[r, k] W[o, k] + bias[o] (bias empty: none).
template <class Scalar>
attend::Matrix<double> affine_by_definition(const attend::Matrix<Scalar>& X, const attend::Matrix<Scalar>& W,
                                            const attend::Vector<Scalar>& bias) {
  attend::Matrix<double> Y(X.rows(), W.rows());  // (rows, out)
  for (attend::Index r = 0; r < X.rows(); ++r)
    for (attend::Index o = 0; o < W.rows(); ++o) {
      double sum = bias.size() > 0 ? static_cast<double>(bias[o]) : 0.0;
      for (attend::Index k = 0; k < X.cols(); ++k) sum += static_cast<double>(X(r, k)) * static_cast<double>(W(o, k));
      Y(r, o) = sum;
    }
  return Y;
}

}  // namespace attend_test
