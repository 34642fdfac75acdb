// attend/detail/projection.hpp — one projection of a batch of rows, as detail/project_rows.hpp and the few-rows
// kernel (detail/avx512/few_rows_projection.hpp) both take it.
#pragma once

#include <attend/config.hpp>
#include <attend/tensor.hpp>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

template <class Scalar>
class TransposedWeight;  // detail/transposed_weight.hpp

// X (rows, in) -> Y (rows, out) = X W^T + b.
template <class Scalar>
struct Projection {
  const Scalar* W;     // (out, in), contiguous, row-major
  Index out;           // W's rows
  const Scalar* bias;  // (out), or null
  Scalar* Y;           // (rows, out), row-major, rows y_stride apart
  Index y_stride;
  TransposedWeight<Scalar>* kept = nullptr;  // where W^T is kept between calls, or null: a copy for this call
};

// A projection from a weight matrix and a bias vector (empty: none) into a contiguous Y (rows, W.rows()); kept:
// where W^T may be kept between calls, or null.
template <class Scalar>
Projection<Scalar> projection(const Matrix<Scalar>& W, const Vector<Scalar>& bias, Scalar* Y,
                              TransposedWeight<Scalar>* kept = nullptr) {
  return {W.data(), W.rows(), bias.size() > 0 ? bias.data() : nullptr, Y, W.rows(), kept};
}

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
