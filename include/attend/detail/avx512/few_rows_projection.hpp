// attend/detail/avx512/few_rows_projection.hpp — Y = X W^T + b for at most 8 rows of floats on the avx512 level,
// reading W as it is stored; and the same product as a decoding step's scores, X the queries and W the keys.
//
// The kept W^T of detail/transposed_weight.hpp puts a packet of outputs in each register and broadcasts X's entries.
// With a few rows that leaves two costs: the bit-for-bit compare of W with the copy W^T was made from, on every call,
// and W^T's padding to whole packets. Here the roles turn round: registers hold the rows, and W's entries are
// broadcast. A register holds 16 floats: 4 rows by 4 steps of the sum. Lane 4c + p of an accumulator of output o sums
// X[r, k] W[o, k] over the steps k = p mod 4 of row r = 4h + c, one register for rows 0-3 (h = 0), another for rows
// 4-7; W[o, 4j .. 4j + 3] is broadcast to the four lane groups by one 16-byte load, and feeds both registers: 2
// multiply-adds for each load of W. The copy is of X instead, which is small: its rows interleaved by groups of 4
// steps, zero past the last row and the last step. No kept state, so nothing to compare; each element of W is read
// once per call.
//
// Y[r, o] = ((sum over k = 0 mod 4 + sum over k = 2 mod 4) + (sum over 1 mod 4 + sum over 3 mod 4)) + b[o], each sum a
// chain of multiply-adds in order: for a given number of rows, the same bits on every call, whatever the thread count
// (one call covers all rows). Not the bits of the kept W^T's single chain over k; both are within rounding of the
// definition (tests/test_few_rows_projection.cpp).
#pragma once

#include <algorithm>
#include <attend/config.hpp>
#include <attend/detail/packet_buffer.hpp>
#include <attend/detail/projection.hpp>
#include <attend/detail/target.hpp>
#include <attend/detail/tuning.hpp>
#include <attend/tensor.hpp>
#include <attend/threads.hpp>
#include <cstring>
#include <type_traits>

#ifdef ATTEND_X86_DISPATCH

ATTEND_TARGET_AVX512_BEGIN
namespace attend {
inline namespace ATTEND_ABI {
namespace detail {
namespace avx512 {

// The steps of a row that one lane group of the interleaved copy holds: 16 bytes, broadcast as one load of the other
// operand's row (4 floats; 8 bfloat16, as 4 pairs).
template <class Element>
constexpr Index step_group = 16 / static_cast<Index>(sizeof(Element));
// The elements of X's interleaved copy on the stack (up to few_rows_stack_in steps): for each group of steps, two
// packets (rows 0-3, rows 4-7).
template <class Element>
constexpr Index interleaved_stack_size =
    (tuning::few_rows_stack_in + step_group<Element> - 1) / step_group<Element> * 8 * step_group<Element>;

// X (rows <= 8, in <= few_rows_max_in), rows ldx apart, interleaved by groups of G = step_group steps into
// (ceil(in / G), 2, 4 G): copy[j][h][G c + p] = X[4h + c, G j + p], zero for 4h + c >= rows or G j + p >= in. For
// floats (G = 4) the quads few_rows_block reads.
template <class Element>
void interleave_steps(const Element* X, Index ldx, Index rows, Index in, Element* copy) {
  constexpr Index G = step_group<Element>;
  const Index count = (in + G - 1) / G;
  std::memset(static_cast<void*>(copy), 0, sizeof(Element) * 8 * G * count);
  for (Index r = 0; r < rows; ++r) {
    const Element* x = X + r * ldx;
    Element* to = copy + 4 * G * (r / 4) + G * (r % 4);
    for (Index j = 0; j < in / G; ++j) std::memcpy(static_cast<void*>(to + 8 * G * j), x + G * j, G * sizeof(Element));
    for (Index k = in / G * G; k < in; ++k) to[8 * G * (in / G) + k % G] = x[k];
  }
}

// Y[r, o] + bias[o] for rows r < rows and outputs o < R <= 8 from H packets of accumulators of 4 rows by 4 steps:
// lane 4c + p of acc[h][o] is row 4h + c's sum over the steps k = p mod 4 (or, for pairs of steps, k / 2 = p mod 4).
// Each group of 4 outputs becomes one packet whose lane 4c + q is Y[4h + c, q]: (p0 + p2) + (p1 + p3). bias: (R) or
// null; Y rows ldy apart.
template <int R, int H>
void store_quad_sums(const __m512 (&acc)[H][4 * ((R + 3) / 4)], Index rows, const float* bias, float* Y, Index ldy) {
  constexpr int G = (R + 3) / 4;
  for (int g = 0; g < G; ++g) {
    const __mmask8 present = static_cast<__mmask8>(4 * g + 4 <= R ? 0xF : (1u << (R % 4)) - 1);  // outputs < R
    const __m128 b = bias == nullptr ? _mm_setzero_ps() : _mm_maskz_loadu_ps(present, bias + 4 * g);
    for (int h = 0; h < H; ++h) {
      const __m512* a = acc[h] + 4 * g;
      const __m512 s01 = _mm512_add_ps(_mm512_shuffle_ps(a[0], a[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                       _mm512_shuffle_ps(a[0], a[1], _MM_SHUFFLE(3, 2, 3, 2)));
      const __m512 s23 = _mm512_add_ps(_mm512_shuffle_ps(a[2], a[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                       _mm512_shuffle_ps(a[2], a[3], _MM_SHUFFLE(3, 2, 3, 2)));
      alignas(64) float y[16];  // lane 4c + q: Y[4h + c, 4g + q] less the bias
      _mm512_store_ps(y, _mm512_add_ps(_mm512_shuffle_ps(s01, s23, _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_ps(s01, s23, _MM_SHUFFLE(3, 1, 3, 1))));
      for (int c = 0; c < 4 && 4 * h + c < rows; ++c)
        _mm_mask_storeu_ps(Y + (4 * h + c) * ldy + 4 * g, present, _mm_add_ps(_mm_load_ps(y + 4 * c), b));
    }
  }
}

// Outputs [0, R) of Y (rows, out) for R <= 8: Y[r, o] = sum_k X[r, k] W[o, k] + bias[o], from X's quads; H packets of
// rows (H = 2 when rows > 4). W: (R, in), rows ldw apart; bias: (R) or null; Y rows ldy apart.
template <int R, int H>
void few_rows_block(const float* quads, Index rows, Index in, const float* W, Index ldw, const float* bias, float* Y,
                    Index ldy) {
  constexpr int G = (R + 3) / 4;  // groups of 4 outputs; outputs past R stay 0
  __m512 acc[H][4 * G];
  for (int h = 0; h < H; ++h)
    for (int o = 0; o < 4 * G; ++o) acc[h][o] = _mm512_setzero_ps();
  const Index whole = in / 4;
  for (Index j = 0; j < whole; ++j) {
    __m512 x[H];
    for (int h = 0; h < H; ++h) x[h] = _mm512_load_ps(quads + 32 * j + 16 * h);  // X[4h + c, 4j + p] in lane 4c + p
#pragma GCC unroll 8
    for (int o = 0; o < R; ++o) {
      const __m512 w = _mm512_broadcast_f32x4(_mm_loadu_ps(W + o * ldw + 4 * j));  // W[o, 4j + p] in lane 4c + p
      for (int h = 0; h < H; ++h) acc[h][o] = _mm512_fmadd_ps(w, x[h], acc[h][o]);
    }
  }
  if (in % 4 != 0) {  // the last steps: W's row ends inside the group; its missing entries are read as 0
    const __mmask8 present = static_cast<__mmask8>((1u << (in % 4)) - 1);
    __m512 x[H];
    for (int h = 0; h < H; ++h) x[h] = _mm512_load_ps(quads + 32 * whole + 16 * h);
    for (int o = 0; o < R; ++o) {
      const __m512 w = _mm512_broadcast_f32x4(_mm_maskz_loadu_ps(present, W + o * ldw + 4 * whole));
      for (int h = 0; h < H; ++h) acc[h][o] = _mm512_fmadd_ps(w, x[h], acc[h][o]);
    }
  }
  store_quad_sums<R, H>(acc, rows, bias, Y, ldy);
}

// The last `rest` < 8 outputs, one block of R = rest.
template <int H, int R = 7>
void few_rows_rest(Index rest, const float* quads, Index rows, Index in, const float* W, Index ldw, const float* bias,
                   float* Y, Index ldy) {
  if constexpr (R > 0) {
    if (rest == R) return few_rows_block<R, H>(quads, rows, in, W, ldw, bias, Y, ldy);
    few_rows_rest<H, R - 1>(rest, quads, rows, in, W, ldw, bias, Y, ldy);
  }
}

// Outputs [0, out) in blocks of 8 and one block of the rest; W (out, in), rows ldw apart.
template <int H>
void few_rows_times_weight_in(const float* quads, Index rows, Index in, const float* W, Index ldw, Index out,
                              const float* bias, float* Y, Index ldy) {
  constexpr int block = 8;
  Index o = 0;
  for (; o + block <= out; o += block)
    few_rows_block<block, H>(quads, rows, in, W + o * ldw, ldw, bias != nullptr ? bias + o : nullptr, Y + o, ldy);
  few_rows_rest<H>(out - o, quads, rows, in, W + o * ldw, ldw, bias != nullptr ? bias + o : nullptr, Y + o, ldy);
}

// The same for at most 8 rows, in one packet of rows (up to 4) or two.
inline void few_rows_times_weight(const float* quads, Index rows, Index in, const float* W, Index ldw, Index out,
                                  const float* bias, float* Y, Index ldy) {
  if (rows > 4)
    few_rows_times_weight_in<2>(quads, rows, in, W, ldw, out, bias, Y, ldy);
  else
    few_rows_times_weight_in<1>(quads, rows, in, W, ldw, out, bias, Y, ldy);
}

// X (rows <= 8, in), rows ldx apart, interleaved (interleave_steps) into on_stack (interleaved_stack_size elements)
// when `in` is at most few_rows_stack_in, else into a buffer kept by the calling thread (allocated once per width);
// where the copy is.
template <class Element>
const Element* interleaved_steps(const Element* X, Index ldx, Index rows, Index in, Element* on_stack) {
  constexpr Index G = step_group<Element>;
  static thread_local PacketBuffer<float> kept;  // the copy's bytes, as floats
  Element* copy = on_stack;                      // (ceil(in / G), 2, 4 G)
  if (in > tuning::few_rows_stack_in) {
    kept.resize((in + G - 1) / G * 8 * G * static_cast<Index>(sizeof(Element)) / static_cast<Index>(sizeof(float)));
    copy = reinterpret_cast<Element*>(kept.data());
  }
  interleave_steps(X, ldx, rows, in, copy);
  return copy;
}

// One row of X (a decoding step): Y[o] = sum_k W[o, k] x[k] + bias[o] for outputs [0, out), W's rows (contiguous, in
// floats each) read whole one after the other, so that W is one stream from memory, a packet of W per multiply-add.
// Y[o] = reduce((a0 + a1) + (a2 + a3)) + bias[o], lane l of a_i summing the steps k = 64 m + 16 i + l in order (the
// last, partial packet in a1, or in a0 when whole packets do not reach a group of 4): the same bits on every call.
inline void one_row_times_weight(const float* x, Index in, const float* W, Index out, const float* bias, float* Y) {
  const Index groups = in / 64 * 64, packets = in / 16 * 16;
  const __mmask16 last = static_cast<__mmask16>((1u << (in - packets)) - 1);
  for (Index o = 0; o < out; ++o) {
    const float* w = W + o * in;
    if (o + 1 < out)  // the next row's cache lines, on their way while this one is summed
      for (Index line = 0; line < in; line += 16)
        _mm_prefetch(reinterpret_cast<const char*>(w + in + line), _MM_HINT_T0);
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    Index k = 0;
    for (; k < groups; k += 64) {
      a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + k), _mm512_loadu_ps(x + k), a0);
      a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + k + 16), _mm512_loadu_ps(x + k + 16), a1);
      a2 = _mm512_fmadd_ps(_mm512_loadu_ps(w + k + 32), _mm512_loadu_ps(x + k + 32), a2);
      a3 = _mm512_fmadd_ps(_mm512_loadu_ps(w + k + 48), _mm512_loadu_ps(x + k + 48), a3);
    }
    for (; k < packets; k += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + k), _mm512_loadu_ps(x + k), a0);
    if (last != 0)
      a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(last, w + packets), _mm512_maskz_loadu_ps(last, x + packets), a1);
    const float sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    Y[o] = bias != nullptr ? sum + bias[o] : sum;
  }
}

// Each of the `count` projections of the same X (rows <= tuning::few_rows, in <= tuning::few_rows_max_in), rows ldx
// apart, reading W as it is (a kept W^T is not used), in pieces of tuning::few_rows_piece outputs of each projection
// shared among the threads (each output's sum is the same whoever computes it, so the bits do not depend on the
// thread count): one row by one_row_times_weight; more rows interleaved once, each piece then in blocks of 8 outputs
// and one block of the rest (few_rows_block). X's copy is on the stack up to few_rows_stack_in inputs, else in a
// buffer kept by the calling thread (allocated once per width).
inline void few_rows_projection(const float* X, Index ldx, Index rows, Index in, const Projection<float>* projections,
                                Index count) {
  alignas(64) float on_stack[interleaved_stack_size<float>];
  // (ceil(in / 4), 2, 16): X's rows interleaved; one row is read as it is
  const float* quads = rows > 1 ? interleaved_steps(X, ldx, rows, in, on_stack) : nullptr;
  constexpr Index piece = tuning::few_rows_piece;
  Index pieces = 0;
  double weights = 0;  // W's entries read
  for (Index i = 0; i < count; ++i) {
    pieces += (projections[i].out + piece - 1) / piece;
    weights += static_cast<double>(projections[i].out) * static_cast<double>(in);
  }
  parallel_for(pieces, weights * tuning::streamed_weight_work, [&](Index item, int) {
    const Projection<float>* p = projections;
    Index o = item * piece;  // the piece's first output, counted over the projections in order
    while (o >= p->out) o -= (p->out + piece - 1) / piece * piece, ++p;
    const Index n = std::min(piece, p->out - o);
    const float* bias = p->bias != nullptr ? p->bias + o : nullptr;
    if (rows == 1) {
      one_row_times_weight(X, in, p->W + o * in, n, bias, p->Y + o);
    } else {
      few_rows_times_weight(quads, rows, in, p->W + o * in, in, n, bias, p->Y + o, p->y_stride);
    }
  });
}

// Requests the cache lines of rows [first, last) of M (elements `width` each, rows ld apart) into L1.
template <class Element>
void prefetch_rows(const Element* M, Index ld, Index first, Index last, Index width) {
  constexpr Index line = 64 / sizeof(Element);  // elements of a cache line
  for (Index r = first; r < last; ++r)
    for (Index c = 0; c < width; c += line) _mm_prefetch(reinterpret_cast<const char*>(M + r * ld + c), _MM_HINT_T0);
}

// Y (rows <= 8, n) = X (rows, d) K^T with K (n, d) read in place, rows ldk apart; X's rows ldx apart, Y's ldy: the
// scores of a few query rows against a block of keys (a decoding step's group of heads), on the calling thread. Each
// score sums as few_rows_block's outputs do: its bits depend on the number of rows only. The keys go in blocks of 8
// (one 4 KiB page of 128-wide keys), and the cache lines of the keys few_rows_prefetch_keys rows on are requested
// before each block, up to `available` rows from K (at least n: the keys that follow this block and will be read next),
// so that the multiply-adds overlap the reads from memory.
inline void few_rows_scores(const float* X, Index ldx, Index rows, Index d, const float* K, Index ldk, Index n,
                            Index available, float* Y, Index ldy) {
  alignas(64) float on_stack[interleaved_stack_size<float>];
  const float* quads = interleaved_steps(X, ldx, rows, d, on_stack);  // (ceil(d / 4), 2, 16)
  constexpr Index block = 8, ahead = tuning::few_rows_prefetch_keys;
  for (Index o = 0; o < n; o += block) {
    prefetch_rows(K, ldk, o + ahead, std::min(o + ahead + block, available), d);
    few_rows_times_weight(quads, rows, d, K + o * ldk, ldk, std::min(block, n - o), nullptr, Y + o, ldy);
  }
}

}  // namespace avx512
}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
ATTEND_TARGET_END

#endif  // ATTEND_X86_DISPATCH

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {
namespace avx512 {

// The few-rows projection of Scalar on the avx512 level, or null: floats only.
template <class Scalar>
constexpr auto few_rows_projection_of() {
  using Entry = void (*)(const Scalar*, Index, Index, Index, const Projection<Scalar>*, Index);
#ifdef ATTEND_X86_DISPATCH
  if constexpr (std::is_same<Scalar, float>::value) return static_cast<Entry>(&few_rows_projection);
#endif
  return static_cast<Entry>(nullptr);
}

// The few-rows scores of Scalar on the avx512 level, or null: floats only.
template <class Scalar>
constexpr auto few_rows_scores_of() {
  using Entry = void (*)(const Scalar*, Index, Index, Index, const Scalar*, Index, Index, Index, Scalar*, Index);
#ifdef ATTEND_X86_DISPATCH
  if constexpr (std::is_same<Scalar, float>::value) return static_cast<Entry>(&few_rows_scores);
#endif
  return static_cast<Entry>(nullptr);
}

}  // namespace avx512
}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
