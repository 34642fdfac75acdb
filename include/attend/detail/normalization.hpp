// attend/detail/normalization.hpp — layer and RMS normalization over the last axis, row by row, forward and backward.
//
// Each row x of n features (llm.c's layernorm_forward / layernorm_backward, with PyTorch's biased variance):
//
//   layer norm   mean = sum(x) / n, rstd = 1 / sqrt(sum((x - mean)^2) / n + eps), xhat = (x - mean) rstd,
//                y = xhat w + b
//   RMS norm     rstd = 1 / sqrt(sum(x^2) / n + eps), xhat = x rstd, y = xhat w          (mean taken as 0)
//
// The forward keeps mean and rstd per row; the backward, from x, mean, rstd and dy:
//
//   g = dy w,  dx = rstd (g - sum(g) / n - xhat sum(g xhat) / n)     (RMS: no sum(g) / n term)
//   dw += sum over rows of dy xhat,  db += sum over rows of dy
//
// The variance is taken around the mean (two passes over the row, which is in cache), not as E[x^2] - mean^2, so a
// row far from 0 with a small spread keeps its digits. An optional residual makes the forward normalise
// z = x + r f (r scaled by dropout factors f, or by 1), written to a kept copy while the row is in cache: AddNorm's
// sum and its normalisation in one pass over memory.
#pragma once

#include <attend/config.hpp>

#include <attend/detail/tuning.hpp>
#include <attend/tensor.hpp>
#include <attend/threads.hpp>
#include <algorithm>
#include <cmath>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

enum class NormKind { layer, rms };

// The rows and the parameters of one normalisation call.
template <class Scalar>
struct NormRows {
  NormKind kind;
  Index rows, features;
  Scalar eps;
  const Scalar* weight;  // (features)
  const Scalar* bias;    // (features), or null (RMS norm has none)
};

// sum over j in [0, n) of term(j), in 16 fixed lanes: lane l takes j = l, l + lanes, ..., and the lanes
// are added in one fixed order at the end. A loop the compiler vectorizes without reassociating anything (a single
// running sum is one chain of dependent adds, n times an add's latency), with the same bits on every call.
template <class Scalar, class Term>
Scalar lane_sum(Index n, Term&& term) {
  constexpr int lanes = 16;
  Scalar part[lanes] = {};
  Index j = 0;
  for (; j + lanes <= n; j += lanes)
    for (int l = 0; l < lanes; ++l) part[l] += term(j + l);
  for (int l = 0; j < n; ++j, ++l) part[l] += term(j);
  for (int width = lanes / 2; width > 0; width /= 2)
    for (int l = 0; l < width; ++l) part[l] += part[l + width];
  return part[0];
}

// body(begin, end) over the rows in pieces of about tuning::elementwise_piece elements, shared among the threads;
// each row is computed by one thread, so the bits do not depend on their number.
template <class Body>
void for_row_pieces(Index rows, Index features, Body&& body) {
  const Index per_piece = std::max<Index>(1, tuning::elementwise_piece / std::max<Index>(1, features));
  const Index pieces = (rows + per_piece - 1) / per_piece;
  parallel_for(pieces, static_cast<double>(rows) * static_cast<double>(features) * tuning::elementwise_work,
               [&](Index piece, int) { body(piece * per_piece, std::min(rows, (piece + 1) * per_piece)); });
}

// Y = norm(X + R F): X, Y (rows, features) contiguous; R (same shape) or null for no residual, F its factors (same
// shape) or null for 1; Z (same shape) receives X + R F when not null (the input the backward needs). Y may be X.
// mean_out and rstd_out (rows) receive the statistics when not null (mean 0 for RMS). A reduced Scalar (bfloat16) is
// computed in float from the stored values, each output rounded once.
template <class Scalar>
void normalize_rows(const NormRows<Scalar>& p, const Scalar* X, const Scalar* R, const Scalar* F, Scalar* Z, Scalar* Y,
                    Scalar* mean_out, Scalar* rstd_out) {
  using Acc = compute_type<Scalar>;  // the type the row is computed in
  const Index n = p.features;
  const Acc eps = static_cast<Acc>(p.eps);
  for_row_pieces(p.rows, n, [&](Index first, Index last) {
    for (Index row = first; row < last; ++row) {
      const Scalar* x = X + row * n;
      if (R != nullptr) {  // z = x + r f, into Z (kept) or into Y (computed in place there)
        Scalar* z = Z != nullptr ? Z + row * n : Y + row * n;
        const Scalar* r = R + row * n;
        if (F != nullptr) {
          const Scalar* f = F + row * n;
          for (Index j = 0; j < n; ++j) z[j] = x[j] + r[j] * f[j];
        } else {
          for (Index j = 0; j < n; ++j) z[j] = x[j] + r[j];
        }
        x = z;
      } else if (Z != nullptr) {
        std::copy(x, x + n, Z + row * n);
      }
      const auto at = [x](Index j) { return static_cast<Acc>(x[j]); };
      const Acc mean = p.kind == NormKind::layer ? lane_sum<Acc>(n, at) / static_cast<Acc>(n) : Acc(0);
      const Acc squares = lane_sum<Acc>(n, [&](Index j) { return (at(j) - mean) * (at(j) - mean); });
      const Acc rstd = Acc(1) / std::sqrt(squares / static_cast<Acc>(n) + eps);
      Scalar* y = Y + row * n;
      if (p.bias != nullptr) {
        for (Index j = 0; j < n; ++j)
          y[j] = Scalar((at(j) - mean) * rstd * static_cast<Acc>(p.weight[j]) + static_cast<Acc>(p.bias[j]));
      } else {
        for (Index j = 0; j < n; ++j) y[j] = Scalar((at(j) - mean) * rstd * static_cast<Acc>(p.weight[j]));
      }
      if (mean_out != nullptr) mean_out[row] = Scalar(mean);
      if (rstd_out != nullptr) rstd_out[row] = Scalar(rstd);
    }
  });
}

// The backward pass of normalize_rows: X (rows, features) the normalised input (Z of the forward when it had a
// residual), mean and rstd its statistics (rows), dY its output's gradient -> dX (same shape, written; may be dY);
// adds dw into weight_grad and db into bias_grad (null when the norm has no bias). The parameters' gradients are
// summed over the rows first (each column over the rows in order, columns shared among the threads), then dX row by
// row: dX may overwrite dY.
template <class Scalar>
void normalize_rows_backward(const NormRows<Scalar>& p, const Scalar* X, const Scalar* mean_in, const Scalar* rstd_in,
                             const Scalar* dY, Scalar* dX, Scalar* weight_grad, Scalar* bias_grad) {
  const Index n = p.features, rows = p.rows;
  const Scalar inv_n = Scalar(1) / static_cast<Scalar>(n);
  // dw and db: pieces of columns, each column summed over the rows in order
  for_row_pieces(n, rows, [&](Index first, Index last) {
    for (Index row = 0; row < rows; ++row) {
      const Scalar *x = X + row * n, *dy = dY + row * n;
      const Scalar mean = mean_in[row], rstd = rstd_in[row];
      for (Index j = first; j < last; ++j) weight_grad[j] += dy[j] * ((x[j] - mean) * rstd);
      if (bias_grad != nullptr)
        for (Index j = first; j < last; ++j) bias_grad[j] += dy[j];
    }
  });
  for_row_pieces(rows, n, [&](Index first, Index last) {
    for (Index row = first; row < last; ++row) {
      const Scalar* x = X + row * n;
      const Scalar* dy = dY + row * n;
      Scalar* dx = dX + row * n;
      const Scalar mean = mean_in[row], rstd = rstd_in[row];
      const Scalar g_mean =
          p.kind == NormKind::layer ? lane_sum<Scalar>(n, [&](Index j) { return dy[j] * p.weight[j]; }) * inv_n
                                    : Scalar(0);
      const Scalar g_xhat_mean =
          lane_sum<Scalar>(n, [&](Index j) { return dy[j] * p.weight[j] * ((x[j] - mean) * rstd); }) * inv_n;
      for (Index j = 0; j < n; ++j) {
        const Scalar xhat = (x[j] - mean) * rstd;
        dx[j] = rstd * (dy[j] * p.weight[j] - g_mean - xhat * g_xhat_mean);
      }
    }
  });
}

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
