// attend/detail/avx512/bf16_rows.hpp — Y = X W^T + b for a few rows of bfloat16 on the avx512 level, which has no
// bfloat16 arithmetic: W and X are read as they are stored, 16 elements a step, each widened to float in its register
// (bfloat16 is float's upper half: a zero extension and a shift, exact) and multiplied and added in float. W is read
// once, at half float's bytes. Each output's 16 lanes are summed in a fixed order and rounded to bfloat16 once.
#pragma once

#include <attend/config.hpp>

#include <attend/detail/bf16_blocks.hpp>
#include <attend/detail/target.hpp>
#include <attend/tensor.hpp>

#ifdef ATTEND_X86_DISPATCH
ATTEND_TARGET_AVX512_BEGIN
namespace attend {
inline namespace ATTEND_ABI {
namespace detail {
namespace avx512 {

// 16 bfloat16 values from x as floats; lanes past `lanes` zero.
inline __m512 widen16(const bfloat16* x, __mmask16 lanes) {
  const __m256i bits = _mm256_maskz_loadu_epi16(lanes, x);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}

// to[i] = from[i] as float, i < count (exact); 16 a step, the tail through masks.
inline void widen(const bfloat16* from, Index count, float* to) {
  for (Index i = 0; i < count; i += 16) {
    const Index left = count - i;
    const __mmask16 lanes = left >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << left) - 1);
    _mm512_mask_storeu_ps(to + i, lanes, widen16(from + i, lanes));
  }
}

// to[i] = from[i] rounded to bfloat16, i < count, the bits of bfloat16(float): to nearest, ties to even (add 0x7fff
// and the kept part's lowest bit, then drop the low half); a NaN the quiet NaN of its sign. 16 a step, the tail
// through masks.
inline void narrow(const float* from, Index count, bfloat16* to) {
  const __m512i one = _mm512_set1_epi32(1), half = _mm512_set1_epi32(0x7fff);
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u)), quiet = _mm512_set1_epi32(0x7fc00000);
  for (Index i = 0; i < count; i += 16) {
    const Index left = count - i;
    const __mmask16 lanes = left >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << left) - 1);
    const __m512 x = _mm512_maskz_loadu_ps(lanes, from + i);
    const __m512i bits = _mm512_castps_si512(x);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), one);
    const __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(half, lsb));
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    const __m512i quiet_nan = _mm512_or_si512(_mm512_and_si512(bits, sign), quiet);
    const __m512i wide = _mm512_srli_epi32(_mm512_mask_blend_epi32(nan, rounded, quiet_nan), 16);
    _mm256_mask_storeu_epi16(to + i, lanes, _mm512_cvtepi32_epi16(wide));
  }
}

// Y (R, C) = X (R, depth) W (C, depth)^T + bias (C, or null), X, W and Y rows ldx, ldw and ldy apart.
template <int R, int C>
void widened_dot_block(const bfloat16* X, Index ldx, const bfloat16* W, Index ldw, Index depth, const float* bias,
                       bfloat16* Y, Index ldy) {
  __m512 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  for (Index k = 0; k < depth; k += 16) {
    const Index left = depth - k;
    const __mmask16 lanes = left >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << left) - 1u);
    __m512 w[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) w[c] = widen16(W + c * ldw + k, lanes);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 x = widen16(X + r * ldx + k, lanes);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_fmadd_ps(x, w[c], acc[r][c]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c)
      Y[r * ldy + c] = bfloat16(_mm512_reduce_add_ps(acc[r][c]) + (bias != nullptr ? bias[c] : 0.0f));
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

}  // namespace avx512
}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
ATTEND_TARGET_END
#endif
