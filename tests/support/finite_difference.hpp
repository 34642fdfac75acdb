// Central finite differences in double, the independent check of every backward pass:
//   dL/dx_i ~ (L(x + h e_i) - L(x - h e_i)) / (2 h),   h = 1e-6
// whose error is O(h^2) from the third derivative plus about 1e-16 / h from rounding L: agreement to 1e-6 relative
// is what a correct gradient of a smooth L gives (the tests use abs 1e-8 for gradients near 0).
#pragma once

#include <attend/tensor.hpp>
#include <support/matchers.hpp>

#include <cstddef>
#include <functional>
#include <vector>

namespace attend_test {

constexpr double finite_difference_step = 1e-6;

// The gradient of loss() with respect to the `size` doubles at x, each moved by +-h in place and put back.
inline std::vector<double> finite_difference(double* x, attend::Index size, const std::function<double()>& loss) {
  std::vector<double> gradient(static_cast<std::size_t>(size));
  const double h = finite_difference_step;
  for (attend::Index i = 0; i < size; ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = loss();
    x[i] = saved - h;
    const double down = loss();
    x[i] = saved;
    gradient[static_cast<std::size_t>(i)] = (up - down) / (2 * h);
  }
  return gradient;
}

// The same for a Tensor3, Matrix or Vector of doubles, as a tensor of that shape.
template <class Tensor>
Tensor finite_difference(Tensor& x, const std::function<double()>& loss) {
  const std::vector<double> g = finite_difference(x.data(), static_cast<attend::Index>(x.size()), loss);
  Tensor gradient = x;
  for (std::size_t i = 0; i < g.size(); ++i) gradient.data()[i] = g[i];
  return gradient;
}

// Agreement with a finite difference: 1e-6 relative, 1e-8 absolute.
inline Tolerance<double> finite_difference_tolerance() { return {1e-6, 1e-8}; }

// sum_i a_i b_i over two tensors of one shape: the scalar loss <dY, Y> whose gradient with respect to Y is dY.
template <class A, class B>
double dot(const A& a, const B& b) {
  double sum = 0;
  for (attend::Index i = 0; i < static_cast<attend::Index>(a.size()); ++i)
    sum += static_cast<double>(a.data()[i]) * static_cast<double>(b.data()[i]);
  return sum;
}

}  // namespace attend_test
