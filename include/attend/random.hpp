// attend/random.hpp — the seeded generator behind parameter initialisation and dropout.
//
// Generator wraps std::mt19937_64, whose sequence the C++ standard fixes, and turns its bits into numbers
// itself (not through std::uniform_real_distribution, whose output differs between standard libraries),
// so a given seed gives the same parameters and the same dropout masks with every compiler.
//
// Modules draw their initial parameters from a Generator passed as their last constructor argument, by default
// default_generator(), which manual_seed() reseeds (as torch.manual_seed does). Each module with dropout keeps a
// Generator of its own for its masks (module.generator()), seeded from the one it was constructed with.
// A Generator is not synchronised: do not draw from one generator in two threads at once.
#pragma once

#include <attend/config.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

namespace attend {
inline namespace ATTEND_ABI {

class Generator {
 public:
  // 5489 is std::mt19937_64's own default seed.
  explicit Generator(std::uint64_t seed = 5489u) : engine_(seed) {}

  void seed(std::uint64_t seed) { engine_.seed(seed); }

  // 64 random bits.
  std::uint64_t next() { return engine_(); }

  // Uniform in [0, 1), with the full precision of Scalar (24 bits for float, 53 for double).
  template <class Scalar>
  Scalar uniform01() {
    constexpr int bits = std::numeric_limits<Scalar>::digits;
    const std::uint64_t top = next() >> (64 - bits);
    return static_cast<Scalar>(top) * (Scalar(1) / static_cast<Scalar>(std::uint64_t(1) << bits));
  }

  // Uniform in [lo, hi).
  template <class Scalar>
  Scalar uniform(Scalar lo, Scalar hi) {
    return lo + (hi - lo) * uniform01<Scalar>();
  }

  // Standard normal (mean 0, deviation 1), by the Box-Muller transform of two uniform draws in double: one value per
  // two draws, the same on every platform (std::normal_distribution's output differs between standard libraries).
  template <class Scalar>
  Scalar normal() {
    const double u1 = 1.0 - uniform01<double>();  // in (0, 1]: its log is finite
    const double u2 = uniform01<double>();
    return static_cast<Scalar>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586476925286766559 * u2));
  }

 private:
  std::mt19937_64 engine_;
};

// The generator modules draw their parameters from unless given one.
inline Generator& default_generator() {
  static Generator generator;
  return generator;
}

// Reseeds default_generator(): modules constructed afterwards in the same order get the same parameters.
inline void manual_seed(std::uint64_t seed) { default_generator().seed(seed); }

}  // namespace ATTEND_ABI
}  // namespace attend
