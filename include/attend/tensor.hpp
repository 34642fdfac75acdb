// attend/tensor.hpp — the types every other header speaks in, and the checks that guard them.
//
//   Tensor3<Scalar>  (batch, steps, features), row-major: the memory of a contiguous PyTorch tensor
//   TensorMap3<Scalar>, ConstTensorMap3<Scalar>  the same, over the caller's memory (writable, read-only)
//   Matrix<Scalar>   row-major, laid out exactly as PyTorch's parameter of the same name
//   Vector<Scalar>   a column vector (biases)
#pragma once

#include <attend/config.hpp>

#include <Eigen/Core>
#include <array>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unsupported/Eigen/CXX11/Tensor>
#include <type_traits>
#include <utility>

namespace attend {
inline namespace ATTEND_ABI {

using Index = Eigen::Index;

// Brain floating point: float's sign and 8 exponent bits with 7 bits of mantissa, in 16 bits. Modules of bfloat16
// store it and compute in float, rounding each result once (docs/USAGE.md, "Reduced precision").
using bfloat16 = Eigen::bfloat16;

namespace detail {
// True for the scalar types stored in reduced precision and computed in float.
template <class Scalar>
constexpr bool is_reduced = std::is_same<Scalar, bfloat16>::value;
// The type a Scalar's arithmetic runs in: float for a reduced type, the type itself otherwise.
template <class Scalar>
using compute_type = std::conditional_t<is_reduced<Scalar>, float, Scalar>;
}  // namespace detail

template <class Scalar>
using Tensor3 = Eigen::Tensor<Scalar, 3, Eigen::RowMajor>;

// The caller's memory, row-major (batch, steps, features), seen as a Tensor3 without a copy: writable, read-only.
//   rotary.apply(TensorMap3<float>(q.data(), batch, steps, num_heads * head_dim), num_heads);   // q rotated in place
template <class Scalar>
using TensorMap3 = Eigen::TensorMap<Tensor3<Scalar>>;  // (batch, steps, features)
template <class Scalar>
using ConstTensorMap3 = Eigen::TensorMap<const Tensor3<Scalar>>;  // (batch, steps, features)

template <class Scalar>
using Matrix = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <class Scalar>
using Vector = Eigen::Matrix<Scalar, Eigen::Dynamic, 1>;

namespace detail {

// Builds a message from any streamable parts: message("W_q: expected ", 3, ", got ", 4).
template <class... Parts>
std::string message(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

// Throws std::invalid_argument with the parts of the message when `ok` is false.
template <class... Parts>
void require(bool ok, const Parts&... parts) {
  if (!ok) throw std::invalid_argument(message(parts...));
}

// A shape, printed the way PyTorch prints it: "(2, 4, 100)". It formats only when streamed, so a require() whose
// condition holds costs no formatting: messages are built on failure alone. It refers to `dims`, which must outlive
// it (pass it straight to require() or a stream).
template <class Dims>
struct ShapeText {
  const Dims& dims;
};
template <class Dims>
std::ostream& operator<<(std::ostream& out, const ShapeText<Dims>& shape) {
  out << '(';
  for (std::size_t i = 0; i < shape.dims.size(); ++i) out << (i ? ", " : "") << shape.dims[i];
  return out << ')';
}
template <class Dims>
ShapeText<Dims> shape_text(const Dims& dims) {
  return {dims};
}

// Throws unless X has `expected` entries along `axis`:
//   "MultiHeadAttention: queries must have 5 features (axis 2), got shape (2, 3, 4)".
template <class T>
void require_dim(const T& X, int axis, Index expected, const char* where, const char* name,
                 const char* what) {
  require(X.dimension(axis) == expected, where, ": ", name, " must have ", expected, ' ', what, " (axis ", axis,
          "), got shape ", shape_text(X.dimensions()));
}

// Throws unless X and Y agree on `axis`.
template <class TX, class TY>
void require_same_dim(const TX& X, const TY& Y, int axis, const char* where,
                      const char* x_name, const char* y_name, const char* what) {
  require(X.dimension(axis) == Y.dimension(axis), where, ": ", x_name, " and ", y_name, " must have the same ", what,
          " (axis ", axis, "), got ", x_name, ' ', shape_text(X.dimensions()), " and ", y_name, ' ',
          shape_text(Y.dimensions()));
}

// Throws unless X has exactly the shape `expected`:
//   "Linear::backward: grad_output must have shape (2, 3, 4) (batch, steps, out_features), got (2, 3, 5)".
template <class T>
void require_shape(const T& X, const std::array<Index, 3>& expected, const char* where,
                   const char* name, const char* axes) {
  const auto& d = X.dimensions();
  require(d[0] == expected[0] && d[1] == expected[1] && d[2] == expected[2], where, ": ", name, " must have shape ",
          shape_text(expected), ' ', axes, ", got ", shape_text(d));
}

// Throws std::logic_error unless a call was recorded for a backward pass: "Linear::backward: no recorded call (call
// the module's operator() first; forward() records nothing)".
inline void require_recorded(bool recorded, const char* where, const char* module) {
  if (!recorded)
    throw std::logic_error(message(where, ": no recorded call (call the ", module,
                                   "'s operator() first; forward() records nothing)"));
}

// Throws unless `dropout` is a probability in [0, 1].
template <class Scalar>
void require_probability(Scalar dropout, const char* where) {
  require(dropout >= Scalar(0) && dropout <= Scalar(1), where, ": dropout must be in [0, 1], got ", dropout);
}

// Throws unless `value` >= `minimum`.
inline void require_at_least(Index value, Index minimum, const char* where, const char* name) {
  require(value >= minimum, where, ": ", name, " must be at least ", minimum, ", got ", value);
}

// True when every entry of X is finite. x - x is 0 for a finite x and NaN for an infinite or NaN one, and a sum with
// a NaN is NaN: one vectorised pass, where Eigen 3.4's allFinite() tests entry by entry.
template <class Derived>
bool all_finite(const Eigen::DenseBase<Derived>& X) {
  using Scalar = typename Derived::Scalar;
  return (X.derived().array() - X.derived().array()).sum() == Scalar(0);
}

// A tensor's memory seen as a (rows = batch * steps, cols = features) row-major matrix, without a copy: of a Tensor3
// or of a map of one (read-only or writable, as the map is).
template <class Scalar>
Eigen::Map<const Matrix<Scalar>> as_matrix(const Tensor3<Scalar>& X) {
  return {X.data(), X.dimension(0) * X.dimension(1), X.dimension(2)};
}
template <class Scalar>
Eigen::Map<Matrix<Scalar>> as_matrix(Tensor3<Scalar>& X) {
  return {X.data(), X.dimension(0) * X.dimension(1), X.dimension(2)};
}
template <class Scalar>
Eigen::Map<const Matrix<Scalar>> as_matrix(const ConstTensorMap3<Scalar>& X) {
  return {X.data(), X.dimension(0) * X.dimension(1), X.dimension(2)};
}
template <class Scalar>
Eigen::Map<Matrix<Scalar>> as_matrix(const TensorMap3<Scalar>& X) {
  return {X.data(), X.dimension(0) * X.dimension(1), X.dimension(2)};
}

// Slice b of a tensor, (steps, features), as a row-major matrix, without a copy.
template <class Scalar>
Eigen::Map<const Matrix<Scalar>> slice(const Tensor3<Scalar>& X, Index b) {
  return {X.data() + b * X.dimension(1) * X.dimension(2), X.dimension(1), X.dimension(2)};
}
template <class Scalar>
Eigen::Map<Matrix<Scalar>> slice(Tensor3<Scalar>& X, Index b) {
  return {X.data() + b * X.dimension(1) * X.dimension(2), X.dimension(1), X.dimension(2)};
}
template <class Scalar>
Eigen::Map<const Matrix<Scalar>> slice(const ConstTensorMap3<Scalar>& X, Index b) {
  return {X.data() + b * X.dimension(1) * X.dimension(2), X.dimension(1), X.dimension(2)};
}
template <class Scalar>
Eigen::Map<Matrix<Scalar>> slice(const TensorMap3<Scalar>& X, Index b) {
  return {X.data() + b * X.dimension(1) * X.dimension(2), X.dimension(1), X.dimension(2)};
}

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
