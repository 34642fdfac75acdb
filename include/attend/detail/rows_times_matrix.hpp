// attend/detail/rows_times_matrix.hpp — Y = X B (+ bias), or Y += X B, for a row-major B read a row at a time.
//
// Each row of Y is a sum of rows of B scaled by X's entries: packets along Y's columns, R = 4 rows of X at a time and
// up to 4 packets of columns, all R * C accumulators in registers; step k loads C packets of row k of B and R entries
// of X for R * C multiply-adds. No packing, no reduction across lanes: for a B that stays in cache (a kept W^T of a
// projection, detail/transposed_weight.hpp; a block of values in the tiled kernel, detail/flash_attention.hpp) it
// runs faster than Eigen's GEMM, which repacks both operands on every call.
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

// Columns [o0, o0 + C packets) of R rows of Y, those below `out` written: Y[r, o] (+)= sum_k X[r, k] B[k, o]
// (+ bias[o]). X: (R, in), rows ldx apart; B: (in, >= o0 + C packets), rows ldb apart; bias: (out) or null;
// Y: (R, out), rows ldy apart.
template <int R, int C, bool Accumulate, class Scalar>
void rows_times_matrix_block(const Scalar* X, Index ldx, Index in, const Scalar* B, Index ldb, Index o0, Index out,
                             const Scalar* bias, Scalar* Y, Index ldy) {
  namespace ei = Eigen::internal;
  using Packet = RowPacket<Scalar>;
  constexpr Index P = row_packet_size<Scalar>;
  Scalar lanes[P];  // a partial packet of Y, its lanes past `out` unused
  Packet acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      const Index o = o0 + c * P;
      if (!Accumulate || o >= out) {
        acc[r][c] = ei::pset1<Packet>(Scalar(0));
      } else if (o + P <= out) {
        acc[r][c] = ei::ploadu<Packet>(Y + r * ldy + o);
      } else {
        std::fill(lanes, lanes + P, Scalar(0));
        std::copy(Y + r * ldy + o, Y + r * ldy + out, lanes);
        acc[r][c] = ei::ploadu<Packet>(lanes);
      }
    }
  for (Index k = 0; k < in; ++k) {
    const Scalar* b = B + k * ldb + o0;
    Packet bk[C];
    for (int c = 0; c < C; ++c) bk[c] = ei::ploadu<Packet>(b + c * P);
    for (int r = 0; r < R; ++r) {
      const Packet x = ei::pset1<Packet>(X[r * ldx + k]);
      for (int c = 0; c < C; ++c) acc[r][c] = ei::pmadd(x, bk[c], acc[r][c]);
    }
  }
  for (int c = 0; c < C; ++c) {
    const Index o = o0 + c * P;
    if (o >= out) break;
    if (o + P <= out) {
      const Packet add = bias != nullptr ? ei::ploadu<Packet>(bias + o) : ei::pset1<Packet>(Scalar(0));
      for (int r = 0; r < R; ++r) ei::pstoreu(Y + r * ldy + o, ei::padd(acc[r][c], add));
    } else {  // the last, partial packet
      for (int r = 0; r < R; ++r) {
        ei::pstoreu(lanes, acc[r][c]);
        for (Index j = 0; o + j < out; ++j) Y[r * ldy + o + j] = lanes[j] + (bias != nullptr ? bias[o + j] : Scalar(0));
      }
    }
  }
}

// R rows of Y, every column: blocks of 4 packets, then the 1 to 3 packets left.
template <int R, bool Accumulate, class Scalar>
void rows_times_matrix_rows(const Scalar* X, Index ldx, Index in, const Scalar* B, Index ldb, Index out,
                            const Scalar* bias, Scalar* Y, Index ldy) {
  constexpr Index P = row_packet_size<Scalar>;
  const Index packets = (out + P - 1) / P;
  Index p = 0;
  for (; p + 4 <= packets; p += 4)
    rows_times_matrix_block<R, 4, Accumulate>(X, ldx, in, B, ldb, p * P, out, bias, Y, ldy);
  switch (packets - p) {
    case 3: rows_times_matrix_block<R, 3, Accumulate>(X, ldx, in, B, ldb, p * P, out, bias, Y, ldy); break;
    case 2: rows_times_matrix_block<R, 2, Accumulate>(X, ldx, in, B, ldb, p * P, out, bias, Y, ldy); break;
    case 1: rows_times_matrix_block<R, 1, Accumulate>(X, ldx, in, B, ldb, p * P, out, bias, Y, ldy); break;
    default: break;
  }
}

// Y (rows, out) = X (rows, in) B (in, out) + bias, or Y += X B + bias when Accumulate. X rows ldx apart, B rows ldb
// apart, Y rows ldy apart; bias (out) or null. Each row of B is read in whole packets, out rounded up to a multiple of
// row_packet_size<Scalar>: the caller makes those entries readable (padding, or out a multiple of the packet).
template <bool Accumulate, class Scalar>
void rows_times_matrix(const Scalar* X, Index ldx, Index rows, Index in, const Scalar* B, Index ldb, Index out,
                       const Scalar* bias, Scalar* Y, Index ldy) {
  Index r = 0;
  for (; r + 4 <= rows; r += 4)
    rows_times_matrix_rows<4, Accumulate>(X + r * ldx, ldx, in, B, ldb, out, bias, Y + r * ldy, ldy);
  for (; r < rows; ++r)
    rows_times_matrix_rows<1, Accumulate>(X + r * ldx, ldx, in, B, ldb, out, bias, Y + r * ldy, ldy);
}

}  // namespace detail
}  // namespace attend
