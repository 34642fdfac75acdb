// A (batch, steps, features) tensor of uniform values in [lo, hi), from a Generator of its own: the same seed gives
// the same tensor with every compiler (see attend/random.hpp).
#pragma once

#include <attend/random.hpp>
#include <attend/tensor.hpp>

#include <cstdint>

namespace attend_test {

template <class Scalar>
attend::Tensor3<Scalar> random_tensor(attend::Index batch, attend::Index steps, attend::Index features,
                                      std::uint64_t seed, Scalar lo = Scalar(-1), Scalar hi = Scalar(1)) {
  attend::Generator generator(seed);
  attend::Tensor3<Scalar> X(batch, steps, features);  // (batch, steps, features)
  for (attend::Index i = 0; i < X.size(); ++i) X.data()[i] = generator.uniform<Scalar>(lo, hi);
  return X;
}

}  // namespace attend_test
