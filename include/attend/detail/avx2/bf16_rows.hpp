// attend/detail/avx2/bf16_rows.hpp — Y = X W^T + b for a few rows of bfloat16 on the avx2 level: as
// detail/avx512/bf16_rows.hpp, 8 elements a step (a step past the end read through a zeroed copy).
#pragma once

#include <attend/config.hpp>

#include <attend/detail/bf16_blocks.hpp>
#include <attend/detail/target.hpp>
#include <attend/tensor.hpp>
#include <cstring>

#ifdef ATTEND_X86_DISPATCH
ATTEND_TARGET_AVX2_BEGIN
namespace attend {
inline namespace ATTEND_ABI {
namespace detail {
namespace avx2 {

// 8 bfloat16 values from x as floats; when count < 8, the first count of them and zeros.
inline __m256 widen8(const bfloat16* x, Index count) {
  __m128i bits;
  if (count >= 8) {
    bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x));
  } else {
    alignas(16) bfloat16 part[8] = {};
    std::memcpy(part, x, static_cast<std::size_t>(count) * sizeof(bfloat16));
    bits = _mm_load_si128(reinterpret_cast<const __m128i*>(part));
  }
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
}

// The 8 lanes of v summed: (0 + 4, 1 + 5, 2 + 6, 3 + 7) in pairs, then those in pairs.
inline float sum8(__m256 v) {
  const __m128 four = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
  return _mm_cvtss_f32(_mm_add_ss(two, _mm_shuffle_ps(two, two, 1)));
}

// to[i] = from[i] as float, i < count (exact).
inline void widen(const bfloat16* from, Index count, float* to) {
  Index i = 0;
  for (; i + 8 <= count; i += 8) _mm256_storeu_ps(to + i, widen8(from + i, 8));
  if (i < count) {
    alignas(32) float part[8];
    _mm256_store_ps(part, widen8(from + i, count - i));
    std::memcpy(to + i, part, static_cast<std::size_t>(count - i) * sizeof(float));
  }
}

// to[i] = from[i] rounded to bfloat16, i < count, the bits of bfloat16(float): to nearest, ties to even; a NaN the
// quiet NaN of its sign.
inline void narrow(const float* from, Index count, bfloat16* to) {
  const __m256i one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(0x7fff);
  const __m256i sign = _mm256_set1_epi32(static_cast<int>(0x80000000u)), quiet = _mm256_set1_epi32(0x7fc00000);
  Index i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 x = _mm256_loadu_ps(from + i);
    const __m256i bits = _mm256_castps_si256(x);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), one);
    const __m256i rounded = _mm256_add_epi32(bits, _mm256_add_epi32(half, lsb));
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    const __m256i quiet_nan = _mm256_or_si256(_mm256_and_si256(bits, sign), quiet);
    const __m256i wide = _mm256_srli_epi32(_mm256_blendv_epi8(rounded, quiet_nan, nan), 16);
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(wide), _mm256_extracti128_si256(wide, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(to + i), packed);
  }
  for (; i < count; ++i) to[i] = bfloat16(from[i]);
}

// Y (R, C) = X (R, depth) W (C, depth)^T + bias (C, or null), X, W and Y rows ldx, ldw and ldy apart.
template <int R, int C>
void widened_dot_block(const bfloat16* X, Index ldx, const bfloat16* W, Index ldw, Index depth, const float* bias,
                       bfloat16* Y, Index ldy) {
  __m256 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  for (Index k = 0; k < depth; k += 8) {
    const Index left = depth - k;
    __m256 w[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) w[c] = widen8(W + c * ldw + k, left);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 x = widen8(X + r * ldx + k, left);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(x, w[c], acc[r][c]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) Y[r * ldy + c] = bfloat16(sum8(acc[r][c]) + (bias != nullptr ? bias[c] : 0.0f));
}

// Y (rows, columns) = X (rows, depth) W (columns, depth)^T + bias (columns, or null): blocks of 4 rows by 4 columns
// (detail/bf16_blocks.hpp).
inline void widened_rows_times(const bfloat16* X, Index ldx, Index rows, Index depth, const bfloat16* W, Index ldw,
                               const float* bias, bfloat16* Y, Index ldy, Index columns) {
  static constexpr Bf16Blocks blocks = {
      {&widened_dot_block<1, 4>, &widened_dot_block<2, 4>, &widened_dot_block<3, 4>, &widened_dot_block<4, 4>},
      {&widened_dot_block<1, 1>, &widened_dot_block<2, 1>, &widened_dot_block<3, 1>, &widened_dot_block<4, 1>}};
  in_bf16_blocks(blocks, X, ldx, rows, depth, W, ldw, bias, Y, ldy, columns);
}

}  // namespace avx2
}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
ATTEND_TARGET_END
#endif
