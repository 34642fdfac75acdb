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
// The packed product also serves the attention core on bfloat16 storage: its outputs kept in float (stored or added,
// as detail/operands.hpp's Output says) instead of rounded, and a block of values (keys, columns) packed with pairs of
// keys in each lane (pack_pairs_of_rows), so that weights times values is the same product as queries times keys.
// Every output is one fixed sequence of operations whatever the threads: the same bits for any number of them.
#pragma once

#include <attend/config.hpp>

#include <attend/detail/bf16_blocks.hpp>
#include <attend/detail/operands.hpp>
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

// The mask of the first `count` of 16 lanes.
inline __mmask16 first_lanes(Index count) {
  return count >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << count) - 1u);
}

// out[j] lane i = in[i] lane j, for 16 registers of 16 32-bit lanes: pairs of rows interleaved by 32 and 64 bits, then
// the four 128-bit lanes of each group of four exchanged.
inline void transpose16(const __m512i (&in)[16], __m512i (&out)[16]) {
  __m512i t[16], u[16];
#pragma GCC unroll 16
  for (int k = 0; k < 8; ++k) {
    t[2 * k] = _mm512_unpacklo_epi32(in[2 * k], in[2 * k + 1]);
    t[2 * k + 1] = _mm512_unpackhi_epi32(in[2 * k], in[2 * k + 1]);
  }
  // u[4k + c], 128-bit lane L: lane 4L + c of rows 4k .. 4k + 3
#pragma GCC unroll 16
  for (int k = 0; k < 4; ++k) {
    u[4 * k] = _mm512_unpacklo_epi64(t[4 * k], t[4 * k + 2]);
    u[4 * k + 1] = _mm512_unpackhi_epi64(t[4 * k], t[4 * k + 2]);
    u[4 * k + 2] = _mm512_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]);
    u[4 * k + 3] = _mm512_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);
  }
#pragma GCC unroll 16
  for (int c = 0; c < 4; ++c) {
    const __m512i v0 = _mm512_shuffle_i32x4(u[c], u[4 + c], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512i v1 = _mm512_shuffle_i32x4(u[c], u[4 + c], _MM_SHUFFLE(3, 2, 3, 2));
    const __m512i v2 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512i v3 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], _MM_SHUFFLE(3, 2, 3, 2));
    out[c] = _mm512_shuffle_i32x4(v0, v2, _MM_SHUFFLE(2, 0, 2, 0));
    out[4 + c] = _mm512_shuffle_i32x4(v0, v2, _MM_SHUFFLE(3, 1, 3, 1));
    out[8 + c] = _mm512_shuffle_i32x4(v1, v3, _MM_SHUFFLE(2, 0, 2, 0));
    out[12 + c] = _mm512_shuffle_i32x4(v1, v3, _MM_SHUFFLE(3, 1, 3, 1));
  }
}

// Panels panel_first .. panel_first + panel_count - 1 of W (columns, depth), rows ldw apart, into packed: panel c at
// packed + c * pairs_of(depth) * 16 lanes, the pair p of its column j at lane p * 16 + j; zeros past depth and past
// the last column. 16 pairs of 16 columns at a time: their rows loaded (a pair is a 32-bit lane), then transposed.
inline void pack_pairs(const bfloat16* W, Index ldw, Index columns, Index depth, Index panel_first, Index panel_count,
                       std::uint32_t* packed) {
  const Index pairs = pairs_of(depth);
  for (Index c = panel_first; c < panel_first + panel_count; ++c) {
    std::uint32_t* panel = packed + c * pairs * panel_columns;  // (pairs, 16)
    const Index present = std::min<Index>(panel_columns, columns - c * panel_columns);  // columns of W in the panel
    for (Index p0 = 0; p0 < pairs; p0 += 16) {
      const Index left = depth - 2 * p0;  // elements from pair p0 on
      const __mmask32 elements = left >= 32 ? __mmask32(0xffffffffu) : static_cast<__mmask32>((1ull << left) - 1u);
      __m512i rows[16], lanes[16];
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j)
        rows[j] = j < present ? _mm512_maskz_loadu_epi16(elements, W + (c * panel_columns + j) * ldw + 2 * p0)
                              : _mm512_setzero_si512();
      transpose16(rows, lanes);
      const Index count = std::min<Index>(16, pairs - p0);
#pragma GCC unroll 16
      for (int p = 0; p < 16; ++p)
        if (p < count) _mm512_storeu_si512(panel + (p0 + p) * panel_columns, lanes[p]);
    }
  }
}

// V (depth, columns), rows ldv apart, packed as pack_pairs packs W = V^T: panel c at packed + c * pairs_of(depth) *
// 16 lanes, lane p * 16 + j the pair V[2p, 16c + j], V[2p + 1, 16c + j]; zeros past the last row and column.
inline void pack_pairs_of_rows(const bfloat16* V, Index ldv, Index depth, Index columns, std::uint32_t* packed) {
  const Index pairs = pairs_of(depth);
  for (Index c = 0; c * panel_columns < columns; ++c) {
    const __mmask16 lanes = first_lanes(columns - c * panel_columns);
    std::uint32_t* panel = packed + c * pairs * panel_columns;  // (pairs, 16)
    for (Index p = 0; p < pairs; ++p) {
      const bfloat16* v = V + 2 * p * ldv + c * panel_columns;
      const __m512i low = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lanes, v));
      const __m512i high = 2 * p + 1 < depth ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lanes, v + ldv))
                                             : _mm512_setzero_si512();
      _mm512_storeu_si512(panel + p * panel_columns, _mm512_or_si512(low, _mm512_slli_epi32(high, 16)));
    }
  }
}

// Where a packed product's sums go. RoundedOut: Y = sum + bias rounded to bfloat16 once (a projection); bias
// (columns) in float, or null. Output<float>: Y = or += sum + bias in float (the attention core's products).
struct RoundedOut {
  bfloat16* Y;
  Index ldy;
  const float* bias;
};
inline RoundedOut shifted(const RoundedOut& out, Index r0, Index c0) {
  return {out.Y + r0 * out.ldy + c0, out.ldy, out.bias != nullptr ? out.bias + c0 : nullptr};
}
inline void put(const RoundedOut& out, Index r, Index first, __mmask16 lanes, __m512 sum) {
  const __m512 b = out.bias != nullptr ? _mm512_maskz_loadu_ps(lanes, out.bias + first) : _mm512_setzero_ps();
  _mm256_mask_storeu_epi16(out.Y + r * out.ldy + first, lanes, (__m256i)_mm512_cvtneps_pbh(_mm512_add_ps(sum, b)));
}
inline Output<float> shifted(const Output<float>& out, Index r0, Index c0) {
  return {out.data + r0 * out.stride + c0, out.stride, out.accumulate, out.bias != nullptr ? out.bias + c0 : nullptr};
}
inline void put(const Output<float>& out, Index r, Index first, __mmask16 lanes, __m512 sum) {
  float* y = out.data + r * out.stride + first;
  if (out.bias != nullptr) sum = _mm512_add_ps(sum, _mm512_maskz_loadu_ps(lanes, out.bias + first));
  if (out.accumulate) sum = _mm512_add_ps(_mm512_maskz_loadu_ps(lanes, y), sum);
  _mm512_mask_storeu_ps(y, lanes, sum);
}

// Y (R, columns <= C * 16) from X (R, depth) W^T, W^T the C packed panels from `panels` on (panels apart by
// pairs_of(depth) * 16 lanes), into `out` (RoundedOut or Output<float>).
template <int R, int C, class Out>
void rows_times_panels(const bfloat16* X, Index ldx, Index depth, const std::uint32_t* panels, const Out& out,
                       Index columns) {
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
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) put(out, r, first, lanes, acc[r][c]);
  }
}

template <class Out>
using PanelsKernel = void (*)(const bfloat16*, Index, Index, const std::uint32_t*, const Out&, Index);

template <class Out, int R, int... C>
constexpr auto panels_row(std::integer_sequence<int, C...>) {
  return std::array<PanelsKernel<Out>, sizeof...(C)>{&rows_times_panels<R, C + 1, Out>...};
}
template <class Out, int... R>
constexpr auto panels_table(std::integer_sequence<int, R...>) {
  return std::array<std::array<PanelsKernel<Out>, block_panels>, sizeof...(R)>{
      panels_row<Out, R + 1>(std::make_integer_sequence<int, block_panels>{})...};
}

// Y (rows, columns) from X (rows, depth) W^T, W^T the packed panels from `panels` on (the first of them the panel of
// Y's first column), into `out`. Blocks of 64 columns, each taken over every row while its panels stay in cache.
template <class Out>
void times_packed_into(const bfloat16* X, Index ldx, Index rows, Index depth, const std::uint32_t* panels,
                       const Out& out, Index columns) {
  static constexpr auto table = panels_table<Out>(std::make_integer_sequence<int, block_rows>{});
  const Index panel_stride = pairs_of(depth) * panel_columns;
  for (Index c0 = 0; c0 < columns; c0 += block_panels * panel_columns) {
    const Index width = std::min<Index>(block_panels * panel_columns, columns - c0);
    const Index count = (width + panel_columns - 1) / panel_columns;
    const std::uint32_t* block = panels + c0 / panel_columns * panel_stride;
    for (Index r0 = 0; r0 < rows; r0 += block_rows) {
      const Index n = std::min<Index>(block_rows, rows - r0);
      table[n - 1][count - 1](X + r0 * ldx, ldx, depth, block, shifted(out, r0, c0), width);
    }
  }
}

// Y (rows, columns), rows ldy apart, = X (rows, depth) W^T + bias rounded once: times_packed_into.
inline void times_packed(const bfloat16* X, Index ldx, Index rows, Index depth, const std::uint32_t* panels,
                         const float* bias, bfloat16* Y, Index ldy, Index columns) {
  times_packed_into(X, ldx, rows, depth, panels, RoundedOut{Y, ldy, bias}, columns);
}
// Y (rows, columns) (+)= X (rows, depth) W^T (+ Y.bias) in float: times_packed_into.
inline void times_packed_float(const bfloat16* X, Index ldx, Index rows, Index depth, const std::uint32_t* panels,
                               Index columns, const Output<float>& Y) {
  times_packed_into(X, ldx, rows, depth, panels, Y, columns);
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
