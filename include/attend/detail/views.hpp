// attend/detail/views.hpp — what a (batch, steps, features) argument may be: a Tensor3<Scalar> or an Eigen::TensorMap
// of one (TensorMap3, ConstTensorMap3), read in place. Anything else — another rank, a column-major tensor, another
// scalar type, an unevaluated expression — stops the compilation with a one-line message (static_assert).
#pragma once

#include <attend/config.hpp>
#include <attend/detail/heads.hpp>
#include <attend/tensor.hpp>
#include <type_traits>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

// What is known of a type as a tensor argument: known is true for Eigen::Tensor and Eigen::TensorMap of one.
template <class T>
struct TensorKind {
  static constexpr bool known = false;
  static constexpr int rank = 0;
  static constexpr bool row_major = false;
  static constexpr bool writable = false;
  using Scalar = void;
};
template <class S, int R, int Options, class I>
struct TensorKind<Eigen::Tensor<S, R, Options, I>> {
  static constexpr bool known = true;
  static constexpr int rank = R;
  static constexpr bool row_major = (Options & Eigen::RowMajor) != 0;
  static constexpr bool writable = true;
  using Scalar = S;
};
template <class S, int R, int Options, class I, int MapOptions, template <class> class MakePointer>
struct TensorKind<Eigen::TensorMap<Eigen::Tensor<S, R, Options, I>, MapOptions, MakePointer>>
    : TensorKind<Eigen::Tensor<S, R, Options, I>> {};
template <class S, int R, int Options, class I, int MapOptions, template <class> class MakePointer>
struct TensorKind<Eigen::TensorMap<const Eigen::Tensor<S, R, Options, I>, MapOptions, MakePointer>>
    : TensorKind<Eigen::Tensor<S, R, Options, I>> {
  static constexpr bool writable = false;
};

template <class T>
using TensorKindOf = TensorKind<std::remove_cv_t<std::remove_reference_t<T>>>;

// T, in a context that template argument deduction does not look at (the scalar type of a call comes from its first
// tensor; nullptr and {} then convert to the other parameters).
template <class T>
struct Identity {
  using type = T;
};
template <class T>
using non_deduced = typename Identity<T>::type;

// The scalar type of a tensor argument (void for anything else).
template <class T>
using scalar_of = typename TensorKindOf<T>::Scalar;

// Checks, at compile time, that T is a (batch, steps, features) argument of Scalar.
template <class Scalar, class T>
constexpr void check_input3() {
  using Kind = TensorKindOf<T>;
  static_assert(Kind::known, "attend: a (batch, steps, features) argument must be a Tensor3 or a TensorMap of one");
  static_assert(Kind::rank == 3, "attend: a (batch, steps, features) argument must be a rank-3 tensor");
  static_assert(Kind::row_major, "attend: a (batch, steps, features) argument must be row-major (Eigen::RowMajor)");
  static_assert(std::is_same<typename Kind::Scalar, Scalar>::value,
                "attend: every tensor argument of a call must have the call's scalar type");
}

// A read-only map of a (batch, steps, features) argument, no copy.
template <class Scalar, class T>
Eigen::TensorMap<const Tensor3<Scalar>> input3(const T& X) {
  check_input3<Scalar, T>();
  return Eigen::TensorMap<const Tensor3<Scalar>>(X.data(), X.dimension(0), X.dimension(1), X.dimension(2));
}

// A writable map of an output argument: a Tensor3 (taken by reference) or a TensorMap3.
template <class Scalar, class T>
Eigen::TensorMap<Tensor3<Scalar>> output3(T&& X) {
  check_input3<Scalar, T>();
  static_assert(TensorKindOf<T>::writable, "attend: an output argument must be a Tensor3 or a TensorMap3 (not const)");
  return Eigen::TensorMap<Tensor3<Scalar>>(X.data(), X.dimension(0), X.dimension(1), X.dimension(2));
}

// The heads of a (batch, steps, count * dim) map, count heads; dim from the width.
template <class Element, class Map>
Heads<Element> heads_of_map(Map&& X, Index count) {
  const Index width = X.dimension(2);
  return Heads<Element>{
      X.data(), width, X.dimension(1), X.dimension(0), X.dimension(1), count, count > 0 ? width / count : 0};
}

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
