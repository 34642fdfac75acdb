// attend/detail/avx512_bf16/products.hpp — Y = X W^T + b on rows of bfloat16, through AVX512-BF16's dot products
// of pairs (vdpbf16ps: float lane i adds a[2i] b[2i] + a[2i+1] b[2i+1], each product exact in float), accumulated
// in float and rounded to bfloat16 once, to nearest even (vcvtneps2bf16).
//
// Two ways to read W (columns, depth), the caller's choice (detail/bf16_products.hpp):
//   packed    for many rows: W in panels of 16 columns with each pair of depth a 32-bit lane (pack_pairs), so that
//             one pair of X, broadcast to every lane, times one 64-byte row of a panel adds to 16 outputs at once;
//             a block of 6 rows by 4 panels keeps 24 accumulators, and no sum crosses lanes.
//   in place  for a few rows (decoding): each output the dot product of a row of X and a row of W, 32 elements a
//             step, summed across the lanes at the end, so W is read once, as it is stored.
// Every output is one fixed sequence of operations whatever the threads: the same bits for any number of them.
#pragma once

#include <attend/config.hpp>

#include <attend/detail/bf16_blocks.hpp>
#include <attend/detail/target.hpp>
#include <attend/tensor.hpp>
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>

#ifdef ATTEND_X86_DISPATCH
ATTEND_TARGET_AVX512_BF16_BEGIN
namespace attend {
inline namespace ATTEND_ABI {
namespace detail {
namespace avx512_bf16 {

constexpr Index panel_columns = 16;  // a packed panel's columns: one register of float outputs
constexpr int block_rows = 6;        // rows of X a packed block takes
constexpr int block_panels = 4;      // panels it takes: 6 x 4 accumulators, 4 panel rows, 1 broadcast pair

// Pairs of depth a packed row of W holds: depth / 2, rounded up.
constexpr Index pairs_of(Index depth) { return (depth + 1) / 2; }

// Elements x[0] and x[1], as one 32-bit lane (x[0] in its low half, as vdpbf16ps reads a pair).
inline std::uint32_t pair_at(const bfloat16* x) {
  std::uint32_t bits;
  std::memcpy(&bits, x, sizeof bits);
  return bits;
}
// x[0] and a zero: the last pair of an odd depth.
inline std::uint32_t single_at(const bfloat16* x) {
  std::uint16_t bits;
  std::memcpy(&bits, x, sizeof bits);
  return bits;
}

// Panels panel_first .. panel_first + panel_count - 1 of W (columns, depth), rows ldw apart, into packed: panel c at
// packed + c * pairs_of(depth) * 16 lanes, the pair p of its column j at lane p * 16 + j; zeros past depth and past
// the last column.
inline void pack_pairs(const bfloat16* W, Index ldw, Index columns, Index depth, Index panel_first, Index panel_count,
                       std::uint32_t* packed) {
  const Index pairs = pairs_of(depth), whole = depth / 2;
  for (Index c = panel_first; c < panel_first + panel_count; ++c) {
    std::uint32_t* panel = packed + c * pairs * panel_columns;  // (pairs, 16)
    for (Index j = 0; j < panel_columns; ++j) {
      const Index column = c * panel_columns + j;
      if (column >= columns) {
        for (Index p = 0; p < pairs; ++p) panel[p * panel_columns + j] = 0;
        continue;
      }
      const bfloat16* w = W + column * ldw;  // (depth)
      for (Index p = 0; p < whole; ++p) panel[p * panel_columns + j] = pair_at(w + 2 * p);
      if (pairs > whole) panel[whole * panel_columns + j] = single_at(w + depth - 1);
    }
  }
}

// The mask of the first `count` of 16 lanes.
inline __mmask16 first_lanes(Index count) {
  return count >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << count) - 1u);
}

// Y (R, columns <= C * 16), rows ldy apart, = X (R, depth) W^T + bias, W^T the C packed panels from `panels` on
// (panels apart by pairs_of(depth) * 16 lanes); bias (columns) in float, or null.
template <int R, int C>
void rows_times_panels(const bfloat16* X, Index ldx, Index depth, const std::uint32_t* panels, const float* bias,
                       bfloat16* Y, Index ldy, Index columns) {
  const Index pairs = pairs_of(depth), whole = depth / 2, panel_stride = pairs * panel_columns;
  __m512 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  for (Index p = 0; p < pairs; ++p) {
    __m512bh w[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c)
      w[c] = (__m512bh)_mm512_loadu_si512(panels + c * panel_stride + p * panel_columns);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const bfloat16* x = X + r * ldx + 2 * p;
      const __m512bh a = (__m512bh)_mm512_set1_epi32(static_cast<int>(p < whole ? pair_at(x) : single_at(x)));
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], a, w[c]);
    }
  }
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) {
    const Index first = c * panel_columns;
    const __mmask16 lanes = first_lanes(columns - first);
    const __m512 b = bias != nullptr ? _mm512_maskz_loadu_ps(lanes, bias + first) : _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256bh y = _mm512_cvtneps_pbh(_mm512_add_ps(acc[r][c], b));
      _mm256_mask_storeu_epi16(Y + r * ldy + first, lanes, (__m256i)y);
    }
  }
}

using PanelsKernel = void (*)(const bfloat16*, Index, Index, const std::uint32_t*, const float*, bfloat16*, Index,
                              Index);

template <int R, int... C>
constexpr auto panels_row(std::integer_sequence<int, C...>) {
  return std::array<PanelsKernel, sizeof...(C)>{&rows_times_panels<R, C + 1>...};
}
template <int... R>
constexpr auto panels_table(std::integer_sequence<int, R...>) {
  return std::array<std::array<PanelsKernel, block_panels>, sizeof...(R)>{
      panels_row<R + 1>(std::make_integer_sequence<int, block_panels>{})...};
}

// Y (rows, columns), rows ldy apart, = X (rows, depth) W^T + bias, W^T the packed panels from `panels` on (the
// first of them the panel of Y's first column); bias (columns) in float, or null. Blocks of 64 columns, each taken
// over every row while its panels stay in cache.
inline void times_packed(const bfloat16* X, Index ldx, Index rows, Index depth, const std::uint32_t* panels,
                         const float* bias, bfloat16* Y, Index ldy, Index columns) {
  static constexpr auto table = panels_table(std::make_integer_sequence<int, block_rows>{});
  const Index panel_stride = pairs_of(depth) * panel_columns;
  for (Index c0 = 0; c0 < columns; c0 += block_panels * panel_columns) {
    const Index width = std::min<Index>(block_panels * panel_columns, columns - c0);
    const Index count = (width + panel_columns - 1) / panel_columns;
    const std::uint32_t* block = panels + c0 / panel_columns * panel_stride;
    for (Index r0 = 0; r0 < rows; r0 += block_rows) {
      const Index n = std::min<Index>(block_rows, rows - r0);
      table[n - 1][count - 1](X + r0 * ldx, ldx, depth, block, bias != nullptr ? bias + c0 : nullptr,
                              Y + r0 * ldy + c0, ldy, width);
    }
  }
}

// Y (R, C) = X (R, depth) W (C, depth)^T + bias (C, or null), both read in place (rows ldx and ldw apart), 32
// elements a step, the last step masked; Y rows ldy apart.
template <int R, int C>
void dot_block(const bfloat16* X, Index ldx, const bfloat16* W, Index ldw, Index depth, const float* bias, bfloat16* Y,
               Index ldy) {
  __m512 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  for (Index k = 0; k < depth; k += 32) {
    const Index left = depth - k;
    const __mmask32 lanes = left >= 32 ? __mmask32(0xffffffffu) : static_cast<__mmask32>((1ull << left) - 1u);
    __m512bh w[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) w[c] = (__m512bh)_mm512_maskz_loadu_epi16(lanes, W + c * ldw + k);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512bh x = (__m512bh)_mm512_maskz_loadu_epi16(lanes, X + r * ldx + k);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], x, w[c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c)
      Y[r * ldy + c] = bfloat16(_mm512_reduce_add_ps(acc[r][c]) + (bias != nullptr ? bias[c] : 0.0f));
}

// Y (rows, columns) = X (rows, depth) W (columns, depth)^T + bias (columns, or null), W read in place: blocks of 4
// rows by 4 columns (detail/bf16_blocks.hpp).
inline void few_rows_times(const bfloat16* X, Index ldx, Index rows, Index depth, const bfloat16* W, Index ldw,
                           const float* bias, bfloat16* Y, Index ldy, Index columns) {
  static constexpr Bf16Blocks blocks = {{&dot_block<1, 4>, &dot_block<2, 4>, &dot_block<3, 4>, &dot_block<4, 4>},
                                        {&dot_block<1, 1>, &dot_block<2, 1>, &dot_block<3, 1>, &dot_block<4, 1>}};
  in_bf16_blocks(blocks, X, ldx, rows, depth, W, ldw, bias, Y, ldy, columns);
}

}  // namespace avx512_bf16
}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
ATTEND_TARGET_END
#endif
