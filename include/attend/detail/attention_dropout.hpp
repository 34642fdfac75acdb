// attend/detail/attention_dropout.hpp — dropout on attention weights, as a pure function of where a weight is.
//
// Weight (query, key) of pair = b * heads + h in one training call is dropped when the Philox-4x32-10 word
//   philox4x32_10({key / 4, query, pair, pair >> 32}, {seed, seed >> 32})[key % 4]
// is below p * 2^32, where seed is drawn once per call from the module's generator; a kept weight is scaled by
// 1 / (1 - p), as torch.nn.Dropout does. Nothing is stored: the backward pass, and the tiled path's blocks, regenerate
// any part of the mask in any order, and both paths drop the same weights for the same seed. p = 1 drops every
// weight, p = 0 none. Queries and keys up to 2^32 (4 * 2^32 keys): the counter's words.
#pragma once

#include <attend/config.hpp>
#include <attend/detail/philox.hpp>
#include <attend/tensor.hpp>
#include <cmath>
#include <cstdint>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

struct AttentionDropout {
  AttentionDropout() = default;  // off: no weight dropped
  AttentionDropout(double p, std::uint64_t seed)
      : seed(seed), threshold(static_cast<std::uint64_t>(std::llround(p * 4294967296.0))), p(p) {}

  bool active() const { return threshold > 0; }

  // Whether weight (query, key) of pair is dropped.
  bool dropped(Index pair, Index query, Index key) const {
    return words(pair, query, key)[static_cast<std::size_t>(key & 3)] < threshold;
  }

  // row[j] *= the factor of key k0 + j, for j < n: 0 for a dropped weight, 1 / (1 - p) for a kept one.
  // row: (n) contiguous, the keys [k0, k0 + n) of (pair, query).
  template <class Scalar>
  void apply(Scalar* row, Index n, Index pair, Index query, Index k0) const {
    if (!active()) return;
    const Scalar keep_scale = Scalar(1) / (Scalar(1) - static_cast<Scalar>(p));
    for (Index j = 0; j < n;) {
      const Index key = k0 + j;
      const PhiloxWords w = words(pair, query, key);
      for (Index lane = key & 3; lane < 4 && j < n; ++lane, ++j)
        row[j] = w[static_cast<std::size_t>(lane)] < threshold ? Scalar(0) : row[j] * keep_scale;
    }
  }

  std::uint64_t seed = 0;
  std::uint64_t threshold = 0;  // a word below it drops its weight: p * 2^32, rounded
  double p = 0;

 private:
  PhiloxWords words(Index pair, Index query, Index key) const {
    const auto pair_bits = static_cast<std::uint64_t>(pair);
    return philox4x32_10(
        {static_cast<std::uint32_t>(static_cast<std::uint64_t>(key) >> 2), static_cast<std::uint32_t>(query),
         static_cast<std::uint32_t>(pair_bits), static_cast<std::uint32_t>(pair_bits >> 32)},
        {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)});
  }
};

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
