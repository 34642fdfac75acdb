// attend/detail/avx512_bf16/attention.hpp — the attention core's products on queries, keys and values stored in
// bfloat16, on the avx512_bf16 level, accumulated in float.
//
// A decoding step (a few query rows) reads the cache in place: the scores S = X K^T of a few query rows, and the
// weighted sum Y += P V of the weights (float) and the values. The cache is read as stored, at half float's bytes,
// and never copied.
//
// Scores: the few-rows layout of avx512/few_rows_projection.hpp with pairs of steps in each lane. A register holds 4
// rows by 4 pairs: lane 4c + p of the copy of X holds X[4h + c, 8j + 2p] and X[4h + c, 8j + 2p + 1]; K[o, 8j .. 8j + 7]
// (16 bytes) is broadcast to the four lane groups, and one vdpbf16ps adds both products of each lane, each exact in
// float, to its float sum: half the instructions of float's multiply-adds for the same keys. The sums are reduced as
// the float kernel's (store_quad_sums), so each score's bits depend on the number of rows only.
//
// Weighted values: each value row is widened to float in its registers (bfloat16 is float's upper half: exact) and
// multiplied by each row's weight in float: Y[r, c] gets the chain Y[r, c] + sum_j P[r, j] V[j, c] over the keys in
// order, the same bits whatever the thread count or the blocks the keys come in.
//
// More query rows: each block of keys and of values is packed once into pairs for the group's heads, and both
// products are avx512_bf16/products.hpp's packed product (6 rows by 4 panels of 16 columns, vdpbf16ps), kept in
// float: the scores from the bfloat16 queries and the keys' pairs (pack_key_pairs), and the weights, rounded to
// bfloat16 once as FlashAttention and PyTorch's CPU kernel round them, times the values' pairs (pack_pairs_of_rows).
#pragma once

#include <algorithm>
#include <attend/config.hpp>
#include <attend/detail/avx512/bf16_rows.hpp>
#include <attend/detail/avx512/few_rows_projection.hpp>
#include <attend/detail/avx512_bf16/products.hpp>
#include <attend/detail/operands.hpp>
#include <attend/detail/target.hpp>
#include <attend/detail/tuning.hpp>
#include <attend/tensor.hpp>
#include <cstdint>

#ifdef ATTEND_X86_DISPATCH

ATTEND_TARGET_AVX512_BF16_BEGIN
namespace attend {
inline namespace ATTEND_ABI {
namespace detail {
namespace avx512_bf16 {

// Scores [0, R) of a block of keys for R <= 8: Y[r, o] = sum_k X[r, k] K[o, k], from X's octets; H packets of rows
// (H = 2 when rows > 4). K: (R, d), rows ldk apart; Y rows ldy apart.
template <int R, int H>
void pairs_scores_block(const bfloat16* octets, Index rows, Index d, const bfloat16* K, Index ldk, float* Y,
                        Index ldy) {
  constexpr int G = (R + 3) / 4;  // groups of 4 keys; scores past R stay 0
  __m512 acc[H][4 * G];
  #pragma GCC unroll 8
  for (int h = 0; h < H; ++h)
    #pragma GCC unroll 8
    for (int o = 0; o < 4 * G; ++o) acc[h][o] = _mm512_setzero_ps();
  const Index whole = d / 8;
  for (Index j = 0; j < whole; ++j) {
    __m512bh x[H];
    #pragma GCC unroll 8
    for (int h = 0; h < H; ++h) x[h] = (__m512bh)_mm512_load_si512(octets + 64 * j + 32 * h);
#pragma GCC unroll 8
    for (int o = 0; o < R; ++o) {
      // K[o, 8j + 2p], K[o, 8j + 2p + 1] in lane 4c + p
      const __m128i pairs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(K + o * ldk + 8 * j));
      const __m512bh k = (__m512bh)_mm512_broadcast_i32x4(pairs);
      #pragma GCC unroll 8
      for (int h = 0; h < H; ++h) acc[h][o] = _mm512_dpbf16_ps(acc[h][o], k, x[h]);
    }
  }
  if (d % 8 != 0) {  // the last steps: the key's row ends inside the group; its missing entries are read as 0
    const __mmask8 present = static_cast<__mmask8>((1u << (d % 8)) - 1);
    __m512bh x[H];
    #pragma GCC unroll 8
    for (int h = 0; h < H; ++h) x[h] = (__m512bh)_mm512_load_si512(octets + 64 * whole + 32 * h);
    #pragma GCC unroll 8
    for (int o = 0; o < R; ++o) {
      const __m512bh k = (__m512bh)_mm512_broadcast_i32x4(_mm_maskz_loadu_epi16(present, K + o * ldk + 8 * whole));
      #pragma GCC unroll 8
      for (int h = 0; h < H; ++h) acc[h][o] = _mm512_dpbf16_ps(acc[h][o], k, x[h]);
    }
  }
  avx512::store_quad_sums<R, H>(acc, rows, nullptr, Y, ldy);
}

// The scores of the last `rest` < 8 keys, one block of R = rest.
template <int H, int R = 7>
void pairs_scores_rest(Index rest, const bfloat16* octets, Index rows, Index d, const bfloat16* K, Index ldk, float* Y,
                       Index ldy) {
  if constexpr (R > 0) {
    if (rest == R) return pairs_scores_block<R, H>(octets, rows, d, K, ldk, Y, ldy);
    pairs_scores_rest<H, R - 1>(rest, octets, rows, d, K, ldk, Y, ldy);
  }
}

// Y (rows <= 8, n) = X (rows, d) K^T, X and K (n, d) bfloat16 read in place, rows ldx and ldk apart, Y (float) rows
// ldy apart: a decoding step's scores of a few query rows against a block of keys, on the calling thread. The keys go
// in blocks of 8; before each, the cache lines of the keys tuning::few_rows_prefetch_keys rows on are requested, up
// to `available` rows from K (at least n: the keys that follow this block and will be read next).
inline void pairs_scores(const bfloat16* X, Index ldx, Index rows, Index d, const bfloat16* K, Index ldk, Index n,
                         Index available, float* Y, Index ldy) {
  alignas(64) bfloat16 on_stack[avx512::interleaved_stack_size<bfloat16>];
  // (ceil(d / 8), 2, 32): X's rows interleaved by groups of 8 steps, octets[j][h][8c + e] = X[4h + c, 8j + e]
  const bfloat16* octets = avx512::interleaved_steps(X, ldx, rows, d, on_stack);
  constexpr Index block = 8, ahead = tuning::few_rows_prefetch_keys;
  for (Index o = 0; o < n; o += block) {
    avx512::prefetch_rows(K, ldk, o + ahead, std::min(o + ahead + block, available), d);
    const Index count = std::min(block, n - o);
    if (rows > 4) {
      if (count == block)
        pairs_scores_block<block, 2>(octets, rows, d, K + o * ldk, ldk, Y + o, ldy);
      else
        pairs_scores_rest<2>(count, octets, rows, d, K + o * ldk, ldk, Y + o, ldy);
    } else if (count == block) {
      pairs_scores_block<block, 1>(octets, rows, d, K + o * ldk, ldk, Y + o, ldy);
    } else {
      pairs_scores_rest<1>(count, octets, rows, d, K + o * ldk, ldk, Y + o, ldy);
    }
  }
}

// Columns [c0, c0 + 16 C) of Y (R, columns) += P (R, n) V (n, columns), C packets of columns (the last may be partial:
// `last` its lanes in use); P's rows ldp apart, V's ldv, Y's ldy. `fetch` > 0: the first block of columns, which
// requests the cache lines of V's rows tuning::few_rows_prefetch_keys on, `fetch` columns of each, so that the later
// blocks find the rows in cache.
template <int R, int C>
void weighted_values_block(const float* P, Index ldp, Index n, const bfloat16* V, Index ldv, Index c0, __mmask16 last,
                           Index fetch, float* Y, Index ldy) {
  constexpr Index ahead = tuning::few_rows_prefetch_keys;
  __m512 acc[R][C];
  __mmask16 lanes[C];  // of each packet of columns
  #pragma GCC unroll 8
  for (int c = 0; c < C; ++c) lanes[c] = c == C - 1 ? last : __mmask16(0xffff);
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_maskz_loadu_ps(lanes[c], Y + r * ldy + c0 + 16 * c);
  for (Index j = 0; j < n; ++j) {
    if (fetch > 0 && j + ahead < n) avx512::prefetch_rows(V, ldv, j + ahead, j + ahead + 1, fetch);
    __m512 v[C];
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c) v[c] = avx512::widen16(V + j * ldv + c0 + 16 * c, lanes[c]);
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 p = _mm512_set1_ps(P[r * ldp + j]);
      #pragma GCC unroll 8
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_fmadd_ps(p, v[c], acc[r][c]);
    }
  }
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c) _mm512_mask_storeu_ps(Y + r * ldy + c0 + 16 * c, lanes[c], acc[r][c]);
}

// All columns of R rows: blocks of C packets, then the last columns in one block of fewer.
template <int R, int C>
void weighted_values_rows(const float* P, Index ldp, Index n, const bfloat16* V, Index ldv, Index columns, float* Y,
                          Index ldy) {
  constexpr Index width = 16 * C;
  Index c0 = 0;
  for (; c0 + width <= columns; c0 += width)
    weighted_values_block<R, C>(P, ldp, n, V, ldv, c0, __mmask16(0xffff), c0 == 0 ? columns : 0, Y, ldy);
  for (; c0 < columns; c0 += 16) {  // the rest, a packet at a time
    const Index left = columns - c0;
    const __mmask16 last = left >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << left) - 1);
    weighted_values_block<R, 1>(P, ldp, n, V, ldv, c0, last, c0 == 0 ? columns : 0, Y, ldy);
  }
}

// Rows [0, rows) for rows < R: one block of the rest.
template <int R>
void weighted_values_rest(Index rest, const float* P, Index ldp, Index n, const bfloat16* V, Index ldv, Index columns,
                          float* Y, Index ldy) {
  if constexpr (R > 0) {
    if (rest == R) return weighted_values_rows<R, (R > 4 ? 2 : 4)>(P, ldp, n, V, ldv, columns, Y, ldy);
    weighted_values_rest<R - 1>(rest, P, ldp, n, V, ldv, columns, Y, ldy);
  }
}

// Y (rows, columns) += P (rows, n) V (n, columns): P (float) rows ldp apart, V bfloat16 rows ldv apart widened in
// registers, Y (float) rows ldy apart. Rows in blocks of 8 (2 packets of columns at a time) and one block of the rest
// (4 packets at a time up to 4 rows): every value row is read once per block of rows.
inline void weighted_values(const float* P, Index ldp, Index rows, Index n, const bfloat16* V, Index ldv,
                            Index columns, float* Y, Index ldy) {
  constexpr int block = 8;
  Index r = 0;
  for (; r + block <= rows; r += block)
    weighted_values_rows<block, 2>(P + r * ldp, ldp, n, V, ldv, columns, Y + r * ldy, ldy);
  weighted_values_rest<block - 1>(rows - r, P + r * ldp, ldp, n, V, ldv, columns, Y + r * ldy, ldy);
}

// A block of keys K (n, d), rows ldk apart, packed into pairs (pack_pairs: panels of 16 keys, a pair of steps in
// each lane), for the scores X K^T by times_packed_float.
inline void pack_key_pairs(const bfloat16* K, Index ldk, Index n, Index d, std::uint32_t* packed) {
  pack_pairs(K, ldk, n, d, 0, (n + panel_columns - 1) / panel_columns, packed);
}

// Y (rows, dv) (+)= round(P) V in float: P (rows, n) in float, rows n apart, rounded to bfloat16 in place first (to
// nearest even; row i then at P's bytes as n bfloat16 from (bfloat16*) P + 2 i n, the floats lost), V packed by
// pack_pairs_of_rows.
inline void rounded_weights_times_values(float* P, Index rows, Index n, const std::uint32_t* values, Index dv,
                                         const Output<float>& Y) {
  for (Index i = 0; i < rows; ++i) {
    float* row = P + i * n;
    auto* to = reinterpret_cast<bfloat16*>(row);  // each step's 64 bytes written over the 128 it has just read
    for (Index k = 0; k < n; k += 32) {
      const Index left = n - k;
      const __mmask16 low = first_lanes(left), high = left > 16 ? first_lanes(left - 16) : __mmask16(0);
      const __m512 a = _mm512_maskz_loadu_ps(low, row + k), b = _mm512_maskz_loadu_ps(high, row + k + 16);
      const __mmask32 lanes = static_cast<__mmask32>(low) | (static_cast<__mmask32>(high) << 16);
      _mm512_mask_storeu_epi16(to + k, lanes, (__m512i)_mm512_cvtne2ps_pbh(b, a));
    }
  }
  times_packed_float(reinterpret_cast<const bfloat16*>(P), 2 * n, rows, n, values, dv, Y);
}

}  // namespace avx512_bf16
}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
ATTEND_TARGET_END

#endif  // ATTEND_X86_DISPATCH
