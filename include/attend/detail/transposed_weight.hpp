// attend/detail/transposed_weight.hpp — Y = X W^T + b for a few rows, from a kept transposed copy of W.
//
// For a few rows of X, a GEMM library spends more time packing W than multiplying: Eigen re-packs all of W on every
// call, and the seed's (8, 100) x (100, 100) projections spent more than half their time there. Here W^T is kept,
// padded to whole packets, in a TransposedWeight; each row of Y is then a sum of rows of W^T scaled by X's entries,
// which runs on full packets with no reduction across lanes.
//
// A kept copy must never be stale: Linear::weight() hands out a reference, so W may change at any time between
// calls. TransposedWeight therefore keeps the W it was made from and compares it, bit for bit, with the W of every
// call (a memcmp: about a tenth of the product's time at the seed's shape), and rebuilds when they differ.
#pragma once

#include <attend/tensor.hpp>

#include <cstring>

namespace attend {
namespace detail {

template <class Scalar>
class TransposedWeight {
 public:
  using Packet = typename Eigen::internal::packet_traits<Scalar>::type;
  static constexpr Index packet_size = Eigen::internal::packet_traits<Scalar>::size;

  // Makes transposed() W^T for W (out, in), row-major, contiguous: kept as it is when W has the values of the last
  // call, rebuilt otherwise. May allocate (call it outside parallel regions).
  void refresh(const Scalar* W, Index out, Index in) {
    const bool same_shape = source_.rows() == out && source_.cols() == in;
    if (same_shape && (out * in == 0 || std::memcmp(source_.data(), W, sizeof(Scalar) * out * in) == 0)) return;
    source_ = Eigen::Map<const Matrix<Scalar>>(W, out, in);
    const Index padded = (out + packet_size - 1) / packet_size * packet_size;
    transposed_.setZero(in, padded);
    transposed_.leftCols(out) = source_.transpose();
  }

  // W^T, (in, out rounded up to whole packets), zero past column out - 1.
  const Matrix<Scalar>& transposed() const { return transposed_; }

 private:
  Matrix<Scalar> source_;      // (out, in): the W that transposed_ was made from
  Matrix<Scalar> transposed_;  // (in, padded out)
};

// Rows of Y, rows x columns of packets of one block: Y[r, o] = sum_k X[r, k] Wt[k, o] (+ bias[o]), for rows r of
// [0, R) and columns o of the C packets from o0, of which those below `out` are written. X: (R, in), rows ldx apart;
// Wt: (in, padded out), rows ldw apart; bias: (out) or null; Y: (R, out), rows ldy apart. R * C accumulators stay in
// registers; each step k loads C packets of Wt and R entries of X for R * C multiply-adds.
template <int R, int C, class Scalar>
void transposed_block(const Scalar* X, Index ldx, Index in, const Scalar* Wt, Index ldw, Index o0, Index out,
                      const Scalar* bias, Scalar* Y, Index ldy) {
  namespace ei = Eigen::internal;
  using Packet = typename TransposedWeight<Scalar>::Packet;
  constexpr Index P = TransposedWeight<Scalar>::packet_size;
  Packet acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = ei::pset1<Packet>(Scalar(0));
  for (Index k = 0; k < in; ++k) {
    const Scalar* w = Wt + k * ldw + o0;
    Packet wk[C];
    for (int c = 0; c < C; ++c) wk[c] = ei::ploadu<Packet>(w + c * P);
    for (int r = 0; r < R; ++r) {
      const Packet x = ei::pset1<Packet>(X[r * ldx + k]);
      for (int c = 0; c < C; ++c) acc[r][c] = ei::pmadd(x, wk[c], acc[r][c]);
    }
  }
  for (int c = 0; c < C; ++c) {
    const Index o = o0 + c * P;
    if (o >= out) break;
    if (o + P <= out) {
      const Packet b = bias != nullptr ? ei::ploadu<Packet>(bias + o) : ei::pset1<Packet>(Scalar(0));
      for (int r = 0; r < R; ++r) ei::pstoreu(Y + r * ldy + o, ei::padd(acc[r][c], b));
    } else {  // the last, partial packet
      alignas(64) Scalar lanes[P];
      for (int r = 0; r < R; ++r) {
        ei::pstoreu(lanes, acc[r][c]);
        for (Index j = 0; o + j < out; ++j) Y[r * ldy + o + j] = lanes[j] + (bias != nullptr ? bias[o + j] : Scalar(0));
      }
    }
  }
}

// R rows of Y, every column: blocks of 4 packets, then the 1 to 3 packets left.
template <int R, class Scalar>
void transposed_rows(const Scalar* X, Index ldx, Index in, const Matrix<Scalar>& Wt, Index out, const Scalar* bias,
                     Scalar* Y, Index ldy) {
  constexpr Index P = TransposedWeight<Scalar>::packet_size;
  const Index ldw = Wt.cols(), packets = ldw / P;
  Index p = 0;
  for (; p + 4 <= packets; p += 4) transposed_block<R, 4>(X, ldx, in, Wt.data(), ldw, p * P, out, bias, Y, ldy);
  switch (packets - p) {
    case 3: transposed_block<R, 3>(X, ldx, in, Wt.data(), ldw, p * P, out, bias, Y, ldy); break;
    case 2: transposed_block<R, 2>(X, ldx, in, Wt.data(), ldw, p * P, out, bias, Y, ldy); break;
    case 1: transposed_block<R, 1>(X, ldx, in, Wt.data(), ldw, p * P, out, bias, Y, ldy); break;
    default: break;
  }
}

// Y (rows, out) = X (rows, in) W^T + bias, W^T given as weight.transposed() (refreshed by the caller). X rows ldx
// apart, Y rows ldy apart; bias (out) or null. Every element of Y is summed over k in order, whatever `rows`.
template <class Scalar>
void times_transposed(const Scalar* X, Index ldx, Index rows, Index in, const TransposedWeight<Scalar>& weight,
                      Index out, const Scalar* bias, Scalar* Y, Index ldy) {
  const Matrix<Scalar>& Wt = weight.transposed();  // (in, padded out)
  Index r = 0;
  for (; r + 4 <= rows; r += 4) transposed_rows<4>(X + r * ldx, ldx, in, Wt, out, bias, Y + r * ldy, ldy);
  for (; r < rows; ++r) transposed_rows<1>(X + r * ldx, ldx, in, Wt, out, bias, Y + r * ldy, ldy);
}

}  // namespace detail
}  // namespace attend
