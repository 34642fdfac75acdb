// attend/detail/operands.hpp — the operands of the kernel table's entries: for its products, Y (rows, columns) (+)=
// X B + bias, each matrix a pointer with its strides and the flag that belongs to it, so that a call names its
// matrices (`x_rows(Q, ldq, rows)`, `b_packed(Kt, d, stored)`, `y_added(acc, dv)`) instead of passing a dozen sizes
// and two bools in order. The sizes the operands share, steps (X's columns, B's rows) and columns (B's and Y's), are
// the product's own arguments (detail/kernels.hpp: times_matrix, packed_times_matrix, pack_panel, correlate_rows).
// Also the online softmax's running state (online_softmax_rows).
#pragma once

#include <attend/config.hpp>
#include <attend/tensor.hpp>

#include <type_traits>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

// X (rows, steps), the left operand: entry (r, k) at data[r * stride + k]; transposed: X = A^T for A (steps, rows)
// as stored, entry (r, k) at data[k * stride + r].
template <class Scalar>
struct LeftOperand {
  const Scalar* data;
  Index stride;
  Index rows;
  bool transposed;
};

// B (steps, columns) read in place, the right operand: entry (k, o) at data[k * row_stride + o * column_stride].
// padded: each row may be read in whole packets past the last column (a padded copy).
template <class Scalar>
struct RightOperand {
  const Scalar* data;
  Index row_stride;
  Index column_stride;
  bool padded;
};

// B as pack_panel packed it on the active level: a panel `depth` steps deep and `stored` columns wide, of which a
// product reads the steps from `first` on and the first columns.
template <class Scalar>
struct PackedOperand {
  const Scalar* data;
  Index depth;
  Index stored;
  Index first;
};

// X of a correlation (Conv1d): `rows` rows of one sequence, `stride` apart, with `before` more of the sequence's rows
// before the first and `after` after the last; rows beyond those are the sequence's zero padding.
template <class Scalar>
struct SequenceRows {
  const Scalar* data;
  Index stride;
  Index rows;
  Index before;
  Index after;
};

// The taps of a 'same' correlation: `count` matrices B_t (steps, columns), B_t's entry (i, o) at
// data[i * row_stride + t * tap_stride + o * column_stride]; output row r adds X's row r + t - left times B_t.
template <class Scalar>
struct TapsOperand {
  const Scalar* data;
  Index row_stride;
  Index tap_stride;
  Index column_stride;
  Index count;
  Index left;
};

// The running state of an online softmax (FlashAttention's forward) for a block of query rows: each row's largest
// score so far (max), its sum of exponentials relative to that maximum (sum), and its weighted sum of values (acc,
// value_dim wide, rows acc_stride apart).
template <class Scalar>
struct OnlineRows {
  Scalar* max;
  Scalar* sum;
  Scalar* acc;
  Index acc_stride;
  Index value_dim;
};

// Y (rows, columns), rows `stride` apart: set to X B + bias, or X B + bias added to it (accumulate); bias (columns)
// or null.
template <class Scalar>
struct Output {
  Scalar* data;
  Index stride;
  bool accumulate;
  const Scalar* bias;
};

// X: `rows` rows `stride` apart.
template <class Scalar>
LeftOperand<Scalar> x_rows(const Scalar* X, Index stride, Index rows) {
  return {X, stride, rows, false};
}
// X = A^T: X's `rows` rows are the first columns of A, whose rows lie `stride` apart; read in place.
template <class Scalar>
LeftOperand<Scalar> x_columns(const Scalar* A, Index stride, Index rows) {
  return {A, stride, rows, true};
}

// B: rows `stride` apart, ending at the product's last column.
template <class Scalar>
RightOperand<Scalar> b_rows(const Scalar* B, Index stride) {
  return {B, stride, 1, false};
}
// B: rows `stride` apart, each readable in whole packets (padded_to_packets of the product's columns).
template <class Scalar>
RightOperand<Scalar> b_padded_rows(const Scalar* B, Index stride) {
  return {B, stride, 1, true};
}
// B = A^T, read in place: B's rows are the columns of A, whose rows lie `stride` apart (W^T read from W, K^T from K).
template <class Scalar>
RightOperand<Scalar> b_columns(const Scalar* A, Index stride) {
  return {A, 1, stride, false};
}
// B in any layout: entry (k, o) at B[k * row_stride + o * column_stride] (a tap of Conv1d's (out, in, k) weight).
template <class Scalar>
RightOperand<Scalar> b_strided(const Scalar* B, Index row_stride, Index column_stride) {
  return {B, row_stride, column_stride, false};
}
// B packed by pack_panel: `depth` steps by `stored` columns, read from step `first`.
template <class Scalar>
PackedOperand<Scalar> b_packed(const Scalar* packed, Index depth, Index stored, Index first = 0) {
  return {packed, depth, stored, first};
}

// Y = X B + bias. (The bias's type is not deduced, so that a literal nullptr passes.)
template <class Scalar>
Output<Scalar> y_into(Scalar* Y, Index stride, const std::remove_const_t<Scalar>* bias = nullptr) {
  return {Y, stride, false, bias};
}
// Y += X B + bias.
template <class Scalar>
Output<Scalar> y_added(Scalar* Y, Index stride, const std::remove_const_t<Scalar>* bias = nullptr) {
  return {Y, stride, true, bias};
}

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
