// State-dict entries made up for a test, and exact comparisons of what modules return.
//
//   dict["W_q.weight"] = attend_test::counting_tensor<T>({6, 4});   // any values will do where only the shape counts
//   CHECK(attend_test::same(module(X), expected));                  // bit for bit
#pragma once

#include <attend/state_dict.hpp>
#include <attend/tensor.hpp>

#include <utility>
#include <vector>

namespace attend_test {

// A tensor of the given shape with values 0.5, -1.25, 2.0, -2.75, ...: exact in float and double, all different.
template <class Scalar>
attend::NamedTensor<Scalar> counting_tensor(std::vector<attend::Index> shape) {
  attend::NamedTensor<Scalar> t{std::move(shape), {}};
  for (attend::Index i = 0; i < t.numel(); ++i)
    t.values.push_back(Scalar(i % 2 ? -1 : 1) * (Scalar(0.5) + Scalar(0.75) * Scalar(i)));
  return t;
}

// Same shape and the same values, bit for bit.
template <class Scalar>
bool same(const attend::Tensor3<Scalar>& a, const attend::Tensor3<Scalar>& b) {
  if (a.dimensions() != b.dimensions()) return false;
  for (attend::Index i = 0; i < a.size(); ++i)
    if (a.data()[i] != b.data()[i]) return false;
  return true;
}

// The same names, each with the same shape and values.
template <class Scalar>
bool same(const attend::StateDict<Scalar>& a, const attend::StateDict<Scalar>& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, tensor] : a) {
    const auto found = b.find(name);
    if (found == b.end() || found->second.shape != tensor.shape || found->second.values != tensor.values) return false;
  }
  return true;
}

}  // namespace attend_test
