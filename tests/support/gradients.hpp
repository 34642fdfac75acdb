// What the gradient tests share: the tolerance against autograd's fixtures, and a module's gradients flattened.
#pragma once

#include <support/matchers.hpp>

#include <type_traits>
#include <vector>

namespace attend_test {

// A gradient against autograd's. Double: the 1e-9 relative of the forward fixtures. Float: a gradient is a sum of
// products of the forward pass's rounded values over keys and features, batch rows and steps (for the RNN, through
// every later step of the recurrence), so it carries a few times float's 6e-8 rounding per term, more than a forward
// output: 1e-4 relative, 1e-5 absolute for gradients of order 1.
template <class Scalar>
Tolerance<Scalar> gradient_tolerance() {
  if constexpr (std::is_same_v<Scalar, double>) {
    return {1e-9, 1e-11};
  } else {
    return {1e-4f, 1e-5f};
  }
}

// Bit for bit.
template <class Scalar>
Tolerance<Scalar> exact() {
  return {0, 0};
}

// Every parameter gradient of a module, flattened, in parameters() order.
template <class Module>
auto gradients_of(Module& module) {
  using Scalar = std::remove_reference_t<decltype(*module.parameters()[0].grad)>;
  std::vector<Scalar> all;
  for (const auto& p : module.parameters()) all.insert(all.end(), p.grad, p.grad + p.size);
  return all;
}

}  // namespace attend_test
