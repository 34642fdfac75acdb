// attend/detail/project_rows.hpp — Y = X W^T + b on rows, as the attention modules' projections need it.
//
// Eigen's GEMM over fixed chunks of rows_per_chunk rows. The chunks do not depend on the number of threads, so
// neither does any output element's summation order: with OpenMP the chunks are shared among the threads, and the
// result is bit-identical for 1 and N threads. When the same X feeds several projections (Q, K and V of
// self-attention), each chunk of X is used by all of them while it is in cache: one pass over X.
//
// A projection given a TransposedWeight (detail/transposed_weight.hpp) by projection(), for a W^T that fits
// keeps_transposed(), runs on that kept copy instead of Eigen's GEMM: no packing of W on each call, which dominates
// for a few rows (the seed's 8 rows) and still pays at 256 rows for W up to 256 x 256 floats
// (`bench_attention --benchmark_filter=Projection`).
//
// At most few_rows rows (the seed's 8) of floats with AVX-512 take neither: few_rows_times_weight
// (detail/few_rows_projection.hpp) reads W as it is, with no kept copy to compare.
#pragma once

#include <attend/detail/few_rows_projection.hpp>
#include <attend/detail/transposed_weight.hpp>
#include <attend/tensor.hpp>
#include <attend/threads.hpp>

#include <algorithm>
#include <initializer_list>

namespace attend {
namespace detail {

// The chunk of rows: large enough that Eigen's packing of W is a small part of each chunk's work.
constexpr Index rows_per_chunk = 256;

// One projection of a batch of rows: X (rows, in) -> Y (rows, out) = X W^T + b.
template <class Scalar>
struct Projection {
  const Scalar* W;     // (out, in), contiguous, row-major
  Index out;           // W's rows
  const Scalar* bias;  // (out), or null
  Scalar* Y;           // (rows, out), row-major, rows y_stride apart
  Index y_stride;
  TransposedWeight<Scalar>* kept = nullptr;  // where W^T is kept between calls, or null: Eigen's GEMM
};

// True when W (out, in) is small enough for a kept W^T to beat Eigen's GEMM: W^T, padded, within 256 KiB (a quarter
// of one core's L2 here; each block of rows of X, 4 to 12 by the row kernel's register blocks, streams all of it).
template <class Scalar>
bool keeps_transposed(Index out, Index in) {
  const double padded_out = static_cast<double>(padded_to_packets<Scalar>(out));
  return static_cast<double>(in) * padded_out * sizeof(Scalar) <= 256.0 * 1024;
}

// A projection from a weight matrix and a bias vector (empty: none) into a contiguous Y (rows, W.rows()); kept:
// where W^T may be kept between calls, or null. The kept copy is used only when W fits keeps_transposed(): the one
// place that decides.
template <class Scalar>
Projection<Scalar> projection(const Matrix<Scalar>& W, const Vector<Scalar>& bias, Scalar* Y,
                              TransposedWeight<Scalar>* kept = nullptr) {
  const bool keeps = kept != nullptr && keeps_transposed<Scalar>(W.rows(), W.cols());
  return {W.data(), W.rows(), bias.size() > 0 ? bias.data() : nullptr, Y, W.rows(), keeps ? kept : nullptr};
}

// Every projection of `projections` applied to the same X (rows, in); see the top of this file. Shapes must have
// been checked by the caller.
template <class Scalar>
void project_rows(const Eigen::Ref<const Matrix<Scalar>>& X, std::initializer_list<Projection<Scalar>> projections) {
  using Rows = Eigen::Map<Matrix<Scalar>, 0, Eigen::OuterStride<>>;
  const Index rows = X.rows(), in = X.cols();
  if (rows == 0) return;
#ifdef ATTEND_FEW_ROWS_PROJECTION
  if constexpr (has_few_rows_projection<Scalar>) {
    if (rows <= few_rows && in <= few_rows_max_in) {
      alignas(64) float quads[few_rows_copy_size];  // (ceil(in / 4), 2, 16): X's rows interleaved
      interleave_step_quads(X.data(), X.outerStride(), rows, in, quads);
      for (const Projection<Scalar>& p : projections)
        few_rows_times_weight(quads, rows, in, p.W, p.out, p.bias, p.Y, p.y_stride);
      return;
    }
  }
#endif
  const Index chunks = (rows + rows_per_chunk - 1) / rows_per_chunk;
  double width = 0, widest = 0;  // sum and largest of the projections' out
  for (const Projection<Scalar>& p : projections) {
    width += static_cast<double>(p.out);
    widest = std::max(widest, static_cast<double>(p.out));
    if (p.kept != nullptr) p.kept->refresh(p.W, p.out, in);  // may allocate
  }
  const double chunk_rows = static_cast<double>(std::min(rows, rows_per_chunk)), depth = static_cast<double>(in);
  parallel_for(chunks, chunk_rows * depth * widest, static_cast<double>(rows) * depth * width, [&](Index c, int) {
    const Index r0 = c * rows_per_chunk, n = std::min(rows_per_chunk, rows - r0);
    const auto Xc = X.middleRows(r0, n);  // (n, in)
    for (const Projection<Scalar>& p : projections) {
      if (p.kept != nullptr) {
        times_transposed(Xc.data(), X.outerStride(), n, in, *p.kept, p.out, p.bias, p.Y + r0 * p.y_stride, p.y_stride);
        continue;
      }
      const Eigen::Map<const Matrix<Scalar>> W(p.W, p.out, in);            // (out, in)
      Rows Yc(p.Y + r0 * p.y_stride, n, p.out, Eigen::OuterStride<>(p.y_stride));  // (n, out)
      Yc.noalias() = Xc * W.transpose();
      if (p.bias != nullptr) Yc.rowwise() += Eigen::Map<const Eigen::Matrix<Scalar, 1, Eigen::Dynamic>>(p.bias, p.out);
    }
  });
}

}  // namespace detail
}  // namespace attend
