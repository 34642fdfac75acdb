// bfloat16 inputs and comparisons shared by the bfloat16 tests.
#pragma once

#include <attend/random.hpp>
#include <attend/tensor.hpp>

#include <cstdint>
#include <cstring>

namespace attend_test {

inline std::uint16_t bits_of(attend::bfloat16 x) {
  std::uint16_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

// Whether a and b have one shape and the same bits everywhere.
inline bool same_bits(const attend::Tensor3<attend::bfloat16>& a, const attend::Tensor3<attend::bfloat16>& b) {
  if (a.dimensions() != b.dimensions()) return false;
  for (attend::Index i = 0; i < a.size(); ++i)
    if (bits_of(a.data()[i]) != bits_of(b.data()[i])) return false;
  return true;
}

// A (batch, steps, features) tensor of bfloat16 values drawn uniformly in [-1, 1) and rounded.
inline attend::Tensor3<attend::bfloat16> random_bf16(attend::Index batch, attend::Index steps, attend::Index features,
                                                      std::uint64_t seed) {
  attend::Generator generator(seed);
  attend::Tensor3<attend::bfloat16> X(batch, steps, features);
  for (attend::Index i = 0; i < X.size(); ++i) X.data()[i] = attend::bfloat16(generator.uniform(-1.0f, 1.0f));
  return X;
}

}  // namespace attend_test
