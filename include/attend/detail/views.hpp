// attend/detail/views.hpp — what a (batch, steps, features) argument may be: a Tensor3<Scalar> or an Eigen::TensorMap
// of one (TensorMap3, ConstTensorMap3), read in place. Anything else — another rank, a column-major tensor, another
// scalar type, an unevaluated expression — stops the compilation with a one-line message (static_assert).
#pragma once

#include <attend/config.hpp>
#include <attend/detail/heads.hpp>
#include <attend/tensor.hpp>
#include <array>
#include <functional>
#include <initializer_list>
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

// The scalar type a free function takes from its first tensor argument: its Scalar (float for a type without one),
// so that a wrong argument reaches check_input3's message rather than a failed deduction.
template <class T, class = void>
struct ArgumentScalar {
  using type = float;
};
template <class T>
struct ArgumentScalar<T, std::void_t<typename T::Scalar>> {
  using type = std::remove_const_t<typename T::Scalar>;
};
template <class T>
using argument_scalar = typename ArgumentScalar<std::remove_cv_t<std::remove_reference_t<T>>>::type;

// Checks, at compile time, that T is a (batch, steps, features) argument of Scalar: instantiating the class fires
// the first rule T breaks, and only that one (each later rule holds trivially for a type an earlier one refused).
template <class Scalar, class T>
struct Input3Check {
  using Kind = TensorKindOf<T>;
  static constexpr bool known = Kind::known;
  static constexpr bool rank = !known || Kind::rank == 3;
  static constexpr bool layout = !known || Kind::rank != 3 || Kind::row_major;
  static constexpr bool scalar =
      !known || Kind::rank != 3 || !Kind::row_major || std::is_same<typename Kind::Scalar, Scalar>::value;
  static_assert(known, "attend: a (batch, steps, features) argument must be a Tensor3 or a TensorMap of one");
  static_assert(rank, "attend: a (batch, steps, features) argument must be a rank-3 tensor");
  static_assert(layout, "attend: a (batch, steps, features) argument must be row-major (Eigen::RowMajor)");
  static_assert(scalar, "attend: every tensor argument of a call must have the call's scalar type");
  static constexpr bool ok = known && Kind::rank == 3 && Kind::row_major &&
                             std::is_same<typename Kind::Scalar, Scalar>::value;
};
template <class Scalar, class T>
struct Output3Check : Input3Check<Scalar, T> {
  static constexpr bool writable = !Input3Check<Scalar, T>::ok || TensorKindOf<T>::writable;
  static_assert(writable, "attend: an output argument must be a Tensor3 or a TensorMap3 (not const)");
  static constexpr bool ok = Input3Check<Scalar, T>::ok && TensorKindOf<T>::writable;
};

// True when T is a (batch, steps, features) argument of Scalar; a static_assert says why not otherwise.
template <class Scalar, class T>
constexpr bool check_input3() {
  return Input3Check<Scalar, T>::ok;
}

// A read-only map of a (batch, steps, features) argument, no copy. For any other argument the compilation stops at
// Input3Check's message, and nothing here adds errors of its own.
template <class Scalar, class T>
Eigen::TensorMap<const Tensor3<Scalar>> input3(const T& X) {
  if constexpr (Input3Check<Scalar, T>::ok) {
    return Eigen::TensorMap<const Tensor3<Scalar>>(X.data(), X.dimension(0), X.dimension(1), X.dimension(2));
  } else {
    return Eigen::TensorMap<const Tensor3<Scalar>>(nullptr, 0, 0, 0);
  }
}

// A writable map of an output argument: a Tensor3 (taken by reference) or a TensorMap3.
template <class Scalar, class T>
Eigen::TensorMap<Tensor3<Scalar>> output3(T&& X) {
  if constexpr (Output3Check<Scalar, T>::ok) {
    return Eigen::TensorMap<Tensor3<Scalar>>(X.data(), X.dimension(0), X.dimension(1), X.dimension(2));
  } else {
    return Eigen::TensorMap<Tensor3<Scalar>>(nullptr, 0, 0, 0);
  }
}

// Throws unless an output and an input of a call share no memory (the output is written while the input is read):
//   "Linear::forward: out must not overlap X (the output is written while X is read)".
template <class Scalar>
void require_apart(const TensorMap3<Scalar>& out, const ConstTensorMap3<Scalar>& input, const char* where,
                   const char* name) {
  const std::less<const Scalar*> before;
  const bool apart = out.size() == 0 || input.size() == 0 || !before(out.data(), input.data() + input.size()) ||
                     !before(input.data(), out.data() + out.size());
  require(apart, where, ": out must not overlap ", name, " (the output is written while ", name, " is read)");
}

// An input of a call, by name, for require_out.
template <class Scalar>
struct NamedInput {
  const ConstTensorMap3<Scalar>* map;
  const char* name;
};

// The checks of every out-parameter overload: out has exactly the shape `expected` (axes names its axes) and shares
// no memory with any of `inputs`.
//   "Linear::forward: out must have shape (2, 4, 8) (batch, steps, out_features), got (2, 5, 8)"
template <class Scalar>
void require_out(const TensorMap3<Scalar>& out, const std::array<Index, 3>& expected, const char* where,
                 const char* axes, std::initializer_list<NamedInput<Scalar>> inputs) {
  require_shape(out, expected, where, "out", axes);
  for (const NamedInput<Scalar>& input : inputs) require_apart(out, *input.map, where, input.name);
}

// The heads of a (batch, steps, count * dim) map, count heads; dim from the width.
template <class Element, class Map>
Heads<Element> heads_of_map(Map&& X, Index count) {
  const Index width = X.dimension(2), dim = count > 0 ? width / count : 0;
  return Heads<Element>{X.data(), width, X.dimension(1), X.dimension(0), X.dimension(1), count, dim, dim};
}

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
