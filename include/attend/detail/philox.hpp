// attend/detail/philox.hpp — Philox-4x32-10, the counter-based generator of Salmon, Moraes, Dror and Shaw,
// "Parallel random numbers: as easy as 1, 2, 3" (SC 2011), which FlashAttention and PyTorch use for dropout.
//
// philox4x32_10(counter, key) is a pure function: four 32-bit words of counter and two of key give four random
// words. Nothing is stored between calls, so any entry of a dropout mask can be generated again, in any order, on
// any thread, from the numbers that name it. Each of the ten rounds multiplies two of the words by the constants
// below (the high and low halves of the products mixed back in with the other two words and the key), and the key
// is bumped by the Weyl constants between rounds: the algorithm of the paper's section 3.3 with its constants.
// Checked against the paper's published known-answer vectors (Random123's kat_vectors) in test_dropout.cpp.
#pragma once

#include <array>
#include <attend/config.hpp>
#include <cstdint>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

using PhiloxWords = std::array<std::uint32_t, 4>;

constexpr PhiloxWords philox4x32_10(PhiloxWords counter, std::array<std::uint32_t, 2> key) {
  constexpr std::uint32_t multiplier0 = 0xD2511F53u, multiplier1 = 0xCD9E8D57u;
  constexpr std::uint32_t weyl0 = 0x9E3779B9u, weyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += weyl0;
      key[1] += weyl1;
    }
    const std::uint64_t product0 = std::uint64_t(multiplier0) * counter[0];
    const std::uint64_t product1 = std::uint64_t(multiplier1) * counter[2];
    counter = {static_cast<std::uint32_t>(product1 >> 32) ^ counter[1] ^ key[0], static_cast<std::uint32_t>(product1),
               static_cast<std::uint32_t>(product0 >> 32) ^ counter[3] ^ key[1], static_cast<std::uint32_t>(product0)};
  }
  return counter;
}

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
