// bench/stream_read.hpp — the fastest read of memory one core does here, the bound of a memory-bound step.
//
// stream_sum(p, n): the sum of n floats, each read once, with eight AVX-512 packets in flight when the level in use is
// avx512 (13-15 GB/s on one core of the Emerald Rapids Xeon, where Eigen's sum at the default flags, SSE2, reads
// 9-10), Eigen's sum otherwise.
#pragma once

#include <Eigen/Core>
#include <attend/attend.hpp>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace attend_bench {

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f"))) inline float sum_avx512(const float* p, attend::Index n) {
  __m512 a[8];
  for (auto& x : a) x = _mm512_setzero_ps();
  attend::Index i = 0;
  for (; i + 128 <= n; i += 128)
    for (int j = 0; j < 8; ++j) a[j] = _mm512_add_ps(a[j], _mm512_loadu_ps(p + i + 16 * j));
  float total = 0;
  for (; i < n; ++i) total += p[i];
  alignas(64) float lanes[16];
  for (auto& x : a) {
    _mm512_store_ps(lanes, x);
    for (float lane : lanes) total += lane;
  }
  return total;
}
#endif

inline float stream_sum(const float* p, attend::Index n) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (attend::detail::float_level(attend::active_isa()) == attend::Isa::avx512) return sum_avx512(p, n);
#endif
  return Eigen::Map<const Eigen::VectorXf>(p, n).sum();
}

}  // namespace attend_bench
