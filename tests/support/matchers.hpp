// tests/support/matchers.hpp — Catch2 matchers that compare attend's tensors element by element.
//
//   REQUIRE_THAT(Y, attend_test::Near(fx.tensor3<double>("output"), attend_test::tolerance<TestType>()));
//
// Near(expected, tol) works for attend::Tensor3, attend::Matrix and attend::Vector; the expected
// tensor may have another scalar type than the actual one (a float result against the float64
// fixture); the tolerance's Scalar is the actual one. A match requires
//   1. the same shape (a mismatch fails naming both shapes),
//   2. no NaN or infinity in actual that is not also in expected at that place (same sign for inf),
//   3. |a - e| <= abs + rel * |e| for every element.
// On failure the description names the first failing index (row-major order), both values and
// how many elements failed.
#pragma once

#include <attend/tensor.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <iomanip>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace attend_test {

// Agreement with float64 PyTorch to rounding error: rel 1e-9, abs 1e-12 for a double computation,
// rel 2e-5, abs 2e-6 for a float one.
template <class Scalar>
struct Tolerance {
  double rel, abs;
};

template <class Scalar>
Tolerance<Scalar> tolerance();

template <>
inline Tolerance<double> tolerance<double>() {
  return {1e-9, 1e-12};
}

template <>
inline Tolerance<float> tolerance<float>() {
  return {2e-5, 2e-6};
}

// Agreement between two of attend's own paths on one computation (the direct path and the tiled core): rel 1e-5 in
// float, 1e-12 in double; the absolute part covers outputs that cancel to near 0.
template <class Scalar>
Tolerance<Scalar> path_tolerance();

template <>
inline Tolerance<double> path_tolerance<double>() {
  return {1e-12, 1e-14};
}

template <>
inline Tolerance<float> path_tolerance<float>() {
  return {1e-5, 1e-6};
}

namespace detail {

// A tensor seen as a shape and its elements in row-major order, as doubles.
template <class T>
struct Flat;

template <class Scalar>
struct Flat<attend::Tensor3<Scalar>> {
  static std::vector<attend::Index> shape(const attend::Tensor3<Scalar>& X) {
    return {X.dimension(0), X.dimension(1), X.dimension(2)};
  }
  static double at(const attend::Tensor3<Scalar>& X, attend::Index i) { return static_cast<double>(X.data()[i]); }
  static const char* kind() { return "tensor"; }
};

// attend::Matrix and attend::Vector (a one-column matrix type, seen as 1-D).
template <class Scalar, int Rows, int Cols, int Options, int MaxRows, int MaxCols>
struct Flat<Eigen::Matrix<Scalar, Rows, Cols, Options, MaxRows, MaxCols>> {
  using Type = Eigen::Matrix<Scalar, Rows, Cols, Options, MaxRows, MaxCols>;
  static constexpr bool is_vector = Cols == 1;
  static std::vector<attend::Index> shape(const Type& X) {
    if (is_vector) return {X.rows()};
    return {X.rows(), X.cols()};
  }
  static double at(const Type& X, attend::Index i) {
    return static_cast<double>(X(i / X.cols(), i % X.cols()));
  }
  static const char* kind() { return is_vector ? "vector" : "matrix"; }
};

inline std::string shape_string(const std::vector<attend::Index>& shape) {
  std::ostringstream out;
  out << '(';
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  if (shape.size() == 1) out << ',';
  out << ')';
  return out.str();
}

// Row-major flat index -> "(i, j, k)".
inline std::string index_string(attend::Index flat, const std::vector<attend::Index>& shape) {
  std::vector<attend::Index> index(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return shape_string(index);
}

inline std::string number(double x) {
  std::ostringstream out;
  out << std::setprecision(17) << x;
  return out.str();
}

// Both the same non-finite value (NaN and NaN, or infinities of the same sign).
inline bool same_non_finite(double a, double e) {
  if (std::isnan(a) || std::isnan(e)) return std::isnan(a) && std::isnan(e);
  return a == e;  // at least one is infinite here
}

}  // namespace detail

template <class Actual, class Expected>
class NearMatcher : public Catch::MatcherBase<Actual> {
 public:
  template <class Scalar>
  NearMatcher(Expected expected, Tolerance<Scalar> tol) : expected_(std::move(expected)), rel_(tol.rel), abs_(tol.abs) {}

  bool match(const Actual& actual) const override {
    using A = detail::Flat<Actual>;
    using E = detail::Flat<Expected>;
    actual_shape_ = A::shape(actual);
    failures_ = 0;
    first_failure_.clear();
    shape_ok_ = actual_shape_ == E::shape(expected_);
    if (!shape_ok_) return false;

    attend::Index size = 1;
    for (auto d : actual_shape_) size *= d;
    for (attend::Index i = 0; i < size; ++i) {
      const double a = A::at(actual, i);
      const double e = E::at(expected_, i);
      bool ok;
      std::string why;
      if (!std::isfinite(a) || !std::isfinite(e)) {
        ok = detail::same_non_finite(a, e);
        if (!ok) why = std::isfinite(a) ? "expected is not finite" : "actual is not finite";
      } else {
        const double diff = std::abs(a - e);
        const double allowed = abs_ + rel_ * std::abs(e);
        ok = diff <= allowed;
        if (!ok) why = "|a - e| = " + detail::number(diff) + " > " + detail::number(allowed);
      }
      if (!ok) {
        if (failures_ == 0) {
          first_failure_ = "the first at " + detail::index_string(i, actual_shape_) + ": actual " + detail::number(a) +
                           ", expected " + detail::number(e) + " (" + why + ")";
        }
        ++failures_;
      }
    }
    return failures_ == 0;
  }

  std::string describe() const override {
    using E = detail::Flat<Expected>;
    const auto expected_shape = E::shape(expected_);
    std::ostringstream out;
    out << "is near the expected " << E::kind() << " of shape " << detail::shape_string(expected_shape)
        << " (|a - e| <= " << abs_ << " + " << rel_ << " |e|)";
    if (!shape_ok_) {
      out << ": the shapes differ, actual " << detail::shape_string(actual_shape_) << ", expected "
          << detail::shape_string(expected_shape);
    } else if (failures_ > 0) {
      attend::Index size = 1;
      for (auto d : expected_shape) size *= d;
      out << ": " << failures_ << " of " << size << " elements differ, " << first_failure_;
    }
    return out.str();
  }

 private:
  Expected expected_;
  double rel_, abs_;
  // Filled by match() for describe().
  mutable std::vector<attend::Index> actual_shape_;
  mutable bool shape_ok_ = true;
  mutable attend::Index failures_ = 0;
  mutable std::string first_failure_;
};

// Tensor3 against Tensor3; the tolerance's Scalar is the actual's.
template <class ScalarA, class ScalarE>
NearMatcher<attend::Tensor3<ScalarA>, attend::Tensor3<ScalarE>> Near(const attend::Tensor3<ScalarE>& expected,
                                                                     Tolerance<ScalarA> tol) {
  return {expected, tol};
}

// Matrix against Matrix.
template <class ScalarA, class ScalarE>
NearMatcher<attend::Matrix<ScalarA>, attend::Matrix<ScalarE>> Near(const attend::Matrix<ScalarE>& expected,
                                                                   Tolerance<ScalarA> tol) {
  return {expected, tol};
}

// Vector against Vector.
template <class ScalarA, class ScalarE>
NearMatcher<attend::Vector<ScalarA>, attend::Vector<ScalarE>> Near(const attend::Vector<ScalarE>& expected,
                                                                   Tolerance<ScalarA> tol) {
  return {expected, tol};
}

// The same scalar type on both sides, with its default tolerance.
template <class Scalar>
NearMatcher<attend::Tensor3<Scalar>, attend::Tensor3<Scalar>> Near(const attend::Tensor3<Scalar>& expected) {
  return {expected, tolerance<Scalar>()};
}
template <class Scalar>
NearMatcher<attend::Matrix<Scalar>, attend::Matrix<Scalar>> Near(const attend::Matrix<Scalar>& expected) {
  return {expected, tolerance<Scalar>()};
}
template <class Scalar>
NearMatcher<attend::Vector<Scalar>, attend::Vector<Scalar>> Near(const attend::Vector<Scalar>& expected) {
  return {expected, tolerance<Scalar>()};
}

}  // namespace attend_test
