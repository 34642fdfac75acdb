// attend/detail/project_rows.hpp — Y = X W^T + b on rows, as the attention modules' projections need it.
//
// Each projection multiplies on the row kernel of the active level (detail/kernels/products-inl.hpp) from W^T: the
// copy kept packed in a TransposedWeight (detail/transposed_weight.hpp) when the caller has one, so that W is
// transposed and packed only when it changes; otherwise W^T read from W, each panel transposed into the kernel's
// packed panels as it goes. The row kernel is compiled for each instruction-set level and chosen at run time, so it
// runs at one speed whatever the flags the program was built with (a GEMM of Eigen's is compiled for those flags).
// The work goes in pieces of a fixed chunk of tuning::rows_per_chunk rows by one panel of a projection's columns
// (tuning::product_panel_width, the split the row kernel makes itself, so that a piece changes no element's summation
// order): the pieces do not depend on the number of threads, so the result is bit-identical for 1 and N threads, and
// there are enough of them that no thread waits long for the last (768 rows of three 768-wide projections make 54
// pieces, not 3 chunks for 2 threads). A chunk's pieces come one after the other, so that when the same X feeds
// several projections (Q, K and V of self-attention) its rows are read while they are in cache.
//
// At most tuning::few_rows rows (the seed's 8) of floats on the avx512 level take neither: the level's
// few_rows_projection (detail/avx512/few_rows_projection.hpp) reads W as it is, with no kept copy to compare, and
// interleaves X once for all the projections of a call.
#pragma once

#include <attend/config.hpp>
#include <attend/detail/kernels.hpp>
#include <attend/detail/projection.hpp>
#include <attend/detail/transposed_weight.hpp>
#include <attend/detail/tuning.hpp>
#include <attend/tensor.hpp>
#include <attend/threads.hpp>

#include <algorithm>
#include <initializer_list>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

using tuning::rows_per_chunk;

// Whether the few-rows projection takes X of `rows` rows and `in` columns on `kernel`'s level.
template <class Scalar>
bool takes_few_rows(const Kernels<Scalar>& kernel, Index rows, Index in) {
  return kernel.few_rows_projection != nullptr && rows <= tuning::few_rows && in <= tuning::few_rows_max_in;
}

// Every projection of `projections` applied to the same X (rows, in); see the top of this file. Shapes must have
// been checked by the caller.
template <class Scalar>
void project_rows(const Eigen::Ref<const Matrix<Scalar>>& X, std::initializer_list<Projection<Scalar>> projections) {
  const Index rows = X.rows(), in = X.cols();
  if (rows == 0) return;
  const Kernels<Scalar>& kernel = kernels<Scalar>();
  if (takes_few_rows(kernel, rows, in)) {  // one call for all of them: X is copied once
    kernel.few_rows_projection(X.data(), X.outerStride(), rows, in, projections.begin(),
                               static_cast<Index>(projections.size()));
    return;
  }
  // Each kept W^T refreshed. May allocate: before the parallel region.
  double width_sum = 0;  // the sum of the projections' out
  for (const Projection<Scalar>& p : projections) {
    width_sum += static_cast<double>(p.out);
    if (p.kept != nullptr) {
      p.kept->refresh(p.W, p.out, in);
      p.kept->pack_for(kernel);
    }
  }
  // The pieces of work: each chunk of rows by each panel of each projection's columns, chunk by chunk.
  constexpr Index width = tuning::product_panel_width<Scalar>;
  Index panels = 0;  // of all the projections
  for (const Projection<Scalar>& p : projections) panels += (p.out + width - 1) / width;
  const Index chunks = (rows + rows_per_chunk - 1) / rows_per_chunk;
  parallel_for(chunks * panels, static_cast<double>(rows) * static_cast<double>(in) * width_sum, [&](Index item, int) {
    const Index r0 = item / panels * rows_per_chunk, n = std::min(rows_per_chunk, rows - r0);
    const Projection<Scalar>* p = projections.begin();
    Index c0 = item % panels * width;  // the panel's first column, counted over the projections in order
    while (c0 >= p->out) c0 -= (p->out + width - 1) / width * width, ++p;
    const Index columns = std::min(width, p->out - c0);
    const Scalar* X_r0 = X.data() + r0 * X.outerStride();  // (n, in)
    const Scalar* bias = p->bias != nullptr ? p->bias + c0 : nullptr;
    Scalar* Y = p->Y + r0 * p->y_stride + c0;  // (n, columns), rows y_stride apart
    if (p->kept != nullptr) {  // W^T (in, out), packed: its columns from c0 on are the panel at c0 * in
      kernel.packed_times_matrix(x_rows(X_r0, X.outerStride(), n), in,
                                 b_packed(p->kept->packed() + c0 * in, in, p->out - c0), columns,
                                 y_into(Y, p->y_stride, bias));
    } else {  // W^T read from W: its entry (k, o) at W[o * in + k]
      kernel.times_matrix(x_rows(X_r0, X.outerStride(), n), in, b_columns(p->W + c0 * in, in), columns,
                          y_into(Y, p->y_stride, bias));
    }
  });
}

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
