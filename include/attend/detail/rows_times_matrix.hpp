// attend/detail/rows_times_matrix.hpp — Y = X B (+ bias), or Y += X B, for a row-major B read a row at a time.
//
// Each row of Y is a sum of rows of B scaled by X's entries: packets along Y's columns, R rows of X at a time by up to
// C = 4 packets of columns, all R * C accumulators in registers (row_accumulators below: 6 x 4, or 12 x 2 for a narrow
// Y, with AVX-512's 32 vector registers; 4 x 4 or 8 x 2 with 16); step k loads C packets of row k of B and R entries of
// X for R * C multiply-adds. No packing, no reduction across lanes: for a B that stays in cache (a kept W^T of a
// projection, detail/transposed_weight.hpp; a panel of K^T and a block of values in the tiled kernel,
// detail/flash_attention.hpp; a tiny head's values, detail/attend_rows.hpp) it runs faster than Eigen's GEMM, which
// repacks both operands on every call. A B whose rows end at Y's last column (not padded to whole packets) gets its
// last columns, fewer than a packet, summed by scalars.
//
// Every element of Y is one chain of multiply-adds over k in order, from 0 (or from Y's value when accumulating),
// then plus its bias: the same bits whatever the number of rows in a call, so whatever the number of threads.
#pragma once

#include <attend/tensor.hpp>

#include <algorithm>

namespace attend {
namespace detail {

// The packet type and width that the kernel below works in.
template <class Scalar>
using RowPacket = typename Eigen::internal::packet_traits<Scalar>::type;
template <class Scalar>
constexpr Index row_packet_size = Eigen::internal::packet_traits<Scalar>::size;

// How many accumulators a block of Y keeps in registers: all but 8 of the vector registers on a target with 32 (C
// packets of B and a broadcast of X need the others), 16 on one with 16 (SSE, AVX2; there g++ folds loads of B into
// the multiply-adds). Measured on this machine (Y = Q K^T of a tile of the tiled kernel, 96 x 192, depth 32 or 64):
// 6 x 4 accumulators 136-147 GFLOP/s against 107-114 with 4 x 4, Eigen's GEMM 96-112.
constexpr int row_accumulators = EIGEN_ARCH_DEFAULT_NUMBER_OF_REGISTERS >= 32 ? 24 : 16;

// n rounded up to whole packets: the width of a B padded for rows_times_matrix(..., padded = true, ...).
template <class Scalar>
constexpr Index padded_to_packets(Index n) {
  return (n + row_packet_size<Scalar> - 1) / row_packet_size<Scalar> * row_packet_size<Scalar>;
}

// Columns [0, C packets) of R rows of Y, all of them present: Y[r, o] (+)= sum_k X[r, k] B[k, o] (+ bias[o]).
// X: (R, in), rows ldx apart; B: (in, >= C packets), rows ldb apart; bias: (C packets) or null; Y rows ldy apart.
// Only whole packets here, so that the compiler keeps every accumulator in a register (with the partial packet's
// lane copies in the same function, g++ 12 kept them on the stack: a load and a store around every multiply-add).
template <int R, int C, bool Accumulate, class Scalar>
void rows_times_packets(const Scalar* X, Index ldx, Index in, const Scalar* B, Index ldb, const Scalar* bias, Scalar* Y,
                        Index ldy) {
  namespace ei = Eigen::internal;
  using Packet = RowPacket<Scalar>;
  constexpr Index P = row_packet_size<Scalar>;
  Packet acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c)
      acc[r][c] = Accumulate ? ei::ploadu<Packet>(Y + r * ldy + c * P) : ei::pset1<Packet>(Scalar(0));
  for (Index k = 0; k < in; ++k) {
    const Scalar* b = B + k * ldb;
    Packet bk[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) bk[c] = ei::ploadu<Packet>(b + c * P);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const Packet x = ei::pset1<Packet>(X[r * ldx + k]);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[r][c] = ei::pmadd(x, bk[c], acc[r][c]);
    }
  }
  for (int c = 0; c < C; ++c) {
    if (bias != nullptr) {
      const Packet add = ei::ploadu<Packet>(bias + c * P);
      for (int r = 0; r < R; ++r) acc[r][c] = ei::padd(acc[r][c], add);
    }
    for (int r = 0; r < R; ++r) ei::pstoreu(Y + r * ldy + c * P, acc[r][c]);
  }
}

// Columns [o0, o0 + C packets) of R rows of Y, those below `out` written: as rows_times_packets, B read in whole
// packets. When the last packet runs past `out`, Y's and the bias's entries go through a padded copy.
template <int R, int C, bool Accumulate, class Scalar>
void rows_times_matrix_block(const Scalar* X, Index ldx, Index in, const Scalar* B, Index ldb, Index o0, Index out,
                             const Scalar* bias, Scalar* Y, Index ldy) {
  constexpr Index width = C * row_packet_size<Scalar>;
  const Scalar* bias_o0 = bias != nullptr ? bias + o0 : nullptr;
  const Scalar* B_o0 = in > 0 ? B + o0 : B;  // B is never read when in = 0, and may then be null
  if (o0 + width <= out) {
    rows_times_packets<R, C, Accumulate>(X, ldx, in, B_o0, ldb, bias_o0, Y + o0, ldy);
    return;
  }
  const Index present = out - o0;  // 1 .. width - 1 columns
  Scalar tile[R * width] = {};     // (R, width): the block of Y, zero past `out`
  Scalar bias_tile[width] = {};    // (width)
  if constexpr (Accumulate)
    for (int r = 0; r < R; ++r) std::copy(Y + r * ldy + o0, Y + r * ldy + out, tile + r * width);
  if (bias_o0 != nullptr) std::copy(bias_o0, bias_o0 + present, bias_tile);
  rows_times_packets<R, C, Accumulate>(X, ldx, in, B_o0, ldb, bias_o0 != nullptr ? bias_tile : nullptr, tile, width);
  for (int r = 0; r < R; ++r) std::copy(tile + r * width, tile + r * width + present, Y + r * ldy + o0);
}

// Columns [o0, out) of R rows of Y, fewer than a packet, by scalars: for a B whose rows end at `out`.
template <int R, bool Accumulate, class Scalar>
void rows_times_columns(const Scalar* X, Index ldx, Index in, const Scalar* B, Index ldb, Index o0, Index out,
                        const Scalar* bias, Scalar* Y, Index ldy) {
  for (int r = 0; r < R; ++r)
    for (Index o = o0; o < out; ++o) {
      Scalar sum = Accumulate ? Y[r * ldy + o] : Scalar(0);
      for (Index k = 0; k < in; ++k) sum += X[r * ldx + k] * B[k * ldb + o];
      Y[r * ldy + o] = bias != nullptr ? sum + bias[o] : sum;
    }
}

// R rows of Y, every column: blocks of C = min(4, row_accumulators / R) packets, then the rest; see rows_times_matrix
// for `padded`.
template <int R, bool Accumulate, class Scalar>
void rows_times_matrix_rows(const Scalar* X, Index ldx, Index in, const Scalar* B, Index ldb, Index out, bool padded,
                            const Scalar* bias, Scalar* Y, Index ldy) {
  constexpr Index P = row_packet_size<Scalar>;
  constexpr int C = std::min(4, row_accumulators / R);
  static_assert(C >= 1, "at most row_accumulators rows a block");
  const Index packets = padded ? (out + P - 1) / P : out / P;
  Index p = 0;
  for (; p + C <= packets; p += C)
    rows_times_matrix_block<R, C, Accumulate>(X, ldx, in, B, ldb, p * P, out, bias, Y, ldy);
  switch (packets - p) {
    case 3:
      if constexpr (C > 3) rows_times_matrix_block<R, 3, Accumulate>(X, ldx, in, B, ldb, p * P, out, bias, Y, ldy);
      break;
    case 2:
      if constexpr (C > 2) rows_times_matrix_block<R, 2, Accumulate>(X, ldx, in, B, ldb, p * P, out, bias, Y, ldy);
      break;
    case 1:
      if constexpr (C > 1) rows_times_matrix_block<R, 1, Accumulate>(X, ldx, in, B, ldb, p * P, out, bias, Y, ldy);
      break;
    default: break;
  }
  if (packets * P < out) rows_times_columns<R, Accumulate>(X, ldx, in, B, ldb, packets * P, out, bias, Y, ldy);
}

// Y (rows, out) = X (rows, in) B (in, out) + bias, or Y += X B + bias when Accumulate. X rows ldx apart, B rows ldb
// apart, Y rows ldy apart; bias (out) or null. With in = 0, Y = bias (0 without one), or Y unchanged when
// accumulating: X and B are then never read, and either may be null.
// padded: B's rows may be read in whole packets, out rounded up to a multiple of row_packet_size<Scalar> (a padded
// copy, or out a multiple of the packet); false: B's rows end at `out`, and the last out % packet columns of Y are
// summed by scalars (fine for a short tail, such as a tiny head's 20 columns, 4 of them past the packet).
// Rows go row_accumulators / 4 at a time (6 with 32 registers, C up to 4 packets of columns), or row_accumulators / 2
// and then 8 when out is at most 2 packets (a head of 32 floats: with few rows there, a step would make 2 loads of B
// and as many broadcasts as rows for only 2 multiply-adds a row); the rows left over 4 at a time, then one at a time.
// A row alone makes C loads of B for C multiply-adds, so 8 rows go as 4 + 4, not 6 + 1 + 1 (the seed's projections
// have 8 rows), and 9 as 4 + 4 + 1; 128 rows as 20 blocks of 6 and 2 of 4.
template <bool Accumulate, class Scalar>
void rows_times_matrix(const Scalar* X, Index ldx, Index rows, Index in, const Scalar* B, Index ldb, Index out,
                       bool padded, const Scalar* bias, Scalar* Y, Index ldy) {
  constexpr Index P = row_packet_size<Scalar>;
  constexpr int wide = row_accumulators / 4, narrow = row_accumulators / 2;
  Index r = 0;
  if (out <= 2 * P) {
    for (; r + narrow <= rows; r += narrow)
      rows_times_matrix_rows<narrow, Accumulate>(X + r * ldx, ldx, in, B, ldb, out, padded, bias, Y + r * ldy, ldy);
    if constexpr (narrow > 8)
      for (; r + 8 <= rows; r += 8)
        rows_times_matrix_rows<8, Accumulate>(X + r * ldx, ldx, in, B, ldb, out, padded, bias, Y + r * ldy, ldy);
  } else if constexpr (wide > 4) {
    Index blocks = rows / wide;
    const Index left = rows % wide;
    if (blocks > 0 && (left + wide) % 4 < left % 4) --blocks;  // the last wide block as 4-row ones: fewer rows alone
    for (; r < blocks * wide; r += wide)
      rows_times_matrix_rows<wide, Accumulate>(X + r * ldx, ldx, in, B, ldb, out, padded, bias, Y + r * ldy, ldy);
  }
  for (; r + 4 <= rows; r += 4)
    rows_times_matrix_rows<4, Accumulate>(X + r * ldx, ldx, in, B, ldb, out, padded, bias, Y + r * ldy, ldy);
  for (; r < rows; ++r)
    rows_times_matrix_rows<1, Accumulate>(X + r * ldx, ldx, in, B, ldb, out, padded, bias, Y + r * ldy, ldy);
}

}  // namespace detail
}  // namespace attend
