// attend/activation.hpp — the elementwise activations of the feed-forward networks, and their derivatives.
//
//   relu(x)      = max(x, 0)                                           derivative 0 at x = 0, as PyTorch's
//   gelu(x)      = x Phi(x) = x / 2 (1 + erf(x / sqrt 2))               PyTorch's F.gelu (the erf form)
//   gelu_tanh(x) = x / 2 (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))   F.gelu(approximate='tanh'), GPT-2's gelu_new
//   silu(x)      = x sigmoid(x)                                        Llama's MLP activation (swish)
#pragma once

#include <attend/config.hpp>

#include <attend/detail/tuning.hpp>
#include <attend/detail/views.hpp>
#include <attend/tensor.hpp>
#include <attend/threads.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace attend {
inline namespace ATTEND_ABI {

enum class Activation { relu, gelu, gelu_tanh, silu };

namespace detail {

// Every value of the enum, for the loops that take the activation as a compile-time constant (for_activation_pieces).
template <Activation... Values>
struct ActivationList {};
using all_activations = ActivationList<Activation::relu, Activation::gelu, Activation::gelu_tanh, Activation::silu>;

inline const char* activation_name(Activation activation) {
  switch (activation) {
    case Activation::relu:
      return "relu";
    case Activation::gelu:
      return "gelu";
    case Activation::gelu_tanh:
      return "gelu_tanh";
    case Activation::silu:
      return "silu";
  }
  return nullptr;
}

// Throws std::invalid_argument for a value outside the enum (Activation(7)), naming it. where: the caller.
inline Activation checked_activation(Activation activation, const char* where) {
  require(activation_name(activation) != nullptr, where, ": activation must be relu, gelu, gelu_tanh or silu, got ",
          "Activation(", static_cast<int>(activation), ")");
  return activation;
}

// The constants of the tanh form: sqrt(2 / pi) and the cubic term's 0.044715.
template <class Scalar>
constexpr Scalar gelu_tanh_scale = Scalar(0.79788456080286535587989211986876373695);
template <class Scalar>
constexpr Scalar gelu_tanh_cubic = Scalar(0.044715);

// x > 0 ? x : 0 (0 for NaN and -0 too) as a mask on x's bits: a compiler that keeps the scalar loop has no branch to
// mispredict on inputs of random sign (GCC at -O2 turns the plain comparison into one), and one that vectorizes it
// still can.
template <class Scalar>
Scalar relu_of(Scalar x) {
  using Bits = std::conditional_t<sizeof(Scalar) == 4, std::uint32_t, std::uint64_t>;
  static_assert(sizeof(Bits) == sizeof(Scalar), "relu_of: float or double");
  Bits bits;
  std::memcpy(&bits, &x, sizeof bits);
  bits &= Bits(0) - static_cast<Bits>(x > Scalar(0));
  std::memcpy(&x, &bits, sizeof bits);
  return x;
}

// f(x) for one element.
template <class Scalar>
Scalar activate(Activation activation, Scalar x) {
  switch (activation) {
    case Activation::relu:
      return relu_of(x);
    case Activation::gelu:
      return Scalar(0.5) * x * (Scalar(1) + std::erf(x * Scalar(0.70710678118654752440084436210484903928)));
    case Activation::gelu_tanh: {
      const Scalar inner = gelu_tanh_scale<Scalar> * (x + gelu_tanh_cubic<Scalar> * x * x * x);
      return Scalar(0.5) * x * (Scalar(1) + std::tanh(inner));
    }
    case Activation::silu:
      return x / (Scalar(1) + std::exp(-x));
  }
  return x;
}

// f'(x) for one element.
template <class Scalar>
Scalar activation_derivative(Activation activation, Scalar x) {
  switch (activation) {
    case Activation::relu:
      return static_cast<Scalar>(x > Scalar(0));  // 1 or +0, from the comparison without a branch
    case Activation::gelu: {  // Phi(x) + x phi(x)
      const Scalar cdf = Scalar(0.5) * (Scalar(1) + std::erf(x * Scalar(0.70710678118654752440084436210484903928)));
      const Scalar pdf = Scalar(0.39894228040143267793994605993438186848) * std::exp(Scalar(-0.5) * x * x);
      return cdf + x * pdf;
    }
    case Activation::gelu_tanh: {  // (1 + t) / 2 + x / 2 (1 - t^2) sqrt(2 / pi) (1 + 3 c x^2)
      const Scalar t = std::tanh(gelu_tanh_scale<Scalar> * (x + gelu_tanh_cubic<Scalar> * x * x * x));
      const Scalar inner_derivative =
          gelu_tanh_scale<Scalar> * (Scalar(1) + Scalar(3) * gelu_tanh_cubic<Scalar> * x * x);
      return Scalar(0.5) * (Scalar(1) + t) + Scalar(0.5) * x * (Scalar(1) - t * t) * inner_derivative;
    }
    case Activation::silu: {  // s (1 + x (1 - s)), s = sigmoid(x)
      const Scalar s = Scalar(1) / (Scalar(1) + std::exp(-x));
      return s * (Scalar(1) + x * (Scalar(1) - s));
    }
  }
  return Scalar(1);
}

// body(std::integral_constant<Activation, A>{}) for the A of the list equal to `activation`.
template <class Body, Activation... Values>
void with_constant_activation(Activation activation, Body&& body, ActivationList<Values...>) {
  static_cast<void>(((activation == Values && (body(std::integral_constant<Activation, Values>{}), true)) || ...));
}

// body(A, begin, end) over [0, n) in pieces of tuning::elementwise_piece shared among the threads, with the
// activation A a compile-time constant there (one of all_activations), so that the per-element switch folds away and
// each loop is one formula. Every element is computed alone: the same bits for any number of threads.
template <class Body>
void for_activation_pieces(Activation activation, Index n, Body&& body) {
  const Index pieces = (n + tuning::elementwise_piece - 1) / tuning::elementwise_piece;
  const double work = static_cast<double>(n) *
                      (activation == Activation::relu ? tuning::elementwise_work : tuning::transcendental_work);
  parallel_for(pieces, work, [&](Index piece, int) {
    const Index begin = piece * tuning::elementwise_piece, end = std::min(n, begin + tuning::elementwise_piece);
    with_constant_activation(activation, [&](auto a) { body(a, begin, end); }, all_activations{});
  });
}

// y[i] = f(x[i]) for n elements; y may be x. A reduced Scalar (bfloat16) is computed in float, rounded once.
template <class Scalar>
void activate(Activation activation, const Scalar* x, Scalar* y, Index n) {
  using Acc = compute_type<Scalar>;
  for_activation_pieces(activation, n, [&](auto a, Index begin, Index end) {
    for (Index i = begin; i < end; ++i) y[i] = Scalar(activate(a.value, static_cast<Acc>(x[i])));
  });
}

// dx[i] = dy[i] f'(x[i]) for n elements; dx may be dy.
template <class Scalar>
void activation_backward(Activation activation, const Scalar* x, const Scalar* dy, Scalar* dx, Index n) {
  for_activation_pieces(activation, n, [&](auto a, Index begin, Index end) {
    for (Index i = begin; i < end; ++i) dx[i] = dy[i] * activation_derivative(a.value, x[i]);
  });
}

}  // namespace detail

// X (batch, steps, features) -> f(X), the same shape. X is a Tensor3 or a map of one.
template <class Input, class Scalar = detail::argument_scalar<Input>>
Tensor3<Scalar> activate(const Input& input, Activation activation) {
  const ConstTensorMap3<Scalar> X = detail::input3<Scalar>(input);
  detail::checked_activation(activation, "activate");
  Tensor3<Scalar> Y(X.dimension(0), X.dimension(1), X.dimension(2));  // X's shape
  detail::activate(activation, X.data(), Y.data(), Y.size());
  return Y;
}

// X, dL/dY (both X's shape) -> dL/dX = dL/dY f'(X).
template <class Input, class GradOutput, class Scalar = detail::argument_scalar<Input>>
Tensor3<Scalar> activate_backward(const Input& input, const GradOutput& grad_output, Activation activation) {
  constexpr const char* where = "activate_backward";
  const ConstTensorMap3<Scalar> X = detail::input3<Scalar>(input);
  const ConstTensorMap3<Scalar> dY = detail::input3<Scalar>(grad_output);
  detail::checked_activation(activation, where);
  detail::require_shape(dY, {X.dimension(0), X.dimension(1), X.dimension(2)}, where, "grad_output", "X's shape");
  Tensor3<Scalar> dX(X.dimension(0), X.dimension(1), X.dimension(2));  // X's shape
  detail::activation_backward(activation, X.data(), dY.data(), dX.data(), dX.size());
  return dX;
}

}  // namespace ATTEND_ABI
}  // namespace attend
