// attend/positional_encoding.hpp — sinusoidal positional encoding, as d2l's PositionalEncoding.
//
//   P[i, 2j]     = sin(i / 10000^(2j / d))
//   P[i, 2j + 1] = cos(i / 10000^(2j / d))          i = position, d = num_hiddens
//
// computed in Scalar precision. An odd d is allowed (the seed's code fails on it): the last column is a sine.
// The forward pass adds P[:steps] to every batch row, then applies dropout in training mode.
// state_dict() is empty, as d2l's: d2l keeps P as a plain attribute, neither a parameter nor a buffer (P depends on
// the shape alone).
#pragma once

#include <attend/config.hpp>

#include <attend/dropout.hpp>
#include <attend/detail/views.hpp>
#include <attend/module.hpp>
#include <attend/parameter.hpp>
#include <attend/random.hpp>
#include <attend/state_dict.hpp>
#include <attend/tensor.hpp>
#include <cmath>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {

// The table itself: (max_len, num_hiddens).
// `where` names the caller in error messages.
template <class Scalar>
Matrix<Scalar> positional_encoding_table(Index max_len, Index num_hiddens,
                                         const char* where = "positional_encoding_table") {
  detail::require_at_least(max_len, 1, where, "max_len");
  detail::require_at_least(num_hiddens, 1, where, "num_hiddens");
  Matrix<Scalar> P(max_len, num_hiddens);  // (max_len, num_hiddens)
  for (Index j = 0; 2 * j < num_hiddens; ++j) {
    const Scalar frequency_divisor =
        std::pow(Scalar(10000), static_cast<Scalar>(2 * j) / static_cast<Scalar>(num_hiddens));
    for (Index i = 0; i < max_len; ++i) {
      const Scalar angle = static_cast<Scalar>(i) / frequency_divisor;
      P(i, 2 * j) = std::sin(angle);
      if (2 * j + 1 < num_hiddens) P(i, 2 * j + 1) = std::cos(angle);
    }
  }
  return P;
}

template <class Scalar>
class PositionalEncoding : public Module {
 public:
  // Every argument is checked before the generator is drawn from: a constructor that throws leaves it as it was.
  PositionalEncoding(Index num_hiddens, Scalar dropout, Index max_len = 1000,
                     Generator& generator = default_generator())
      : P_(positional_encoding_table<Scalar>(max_len, num_hiddens, "PositionalEncoding")),
        dropout_(checked_dropout(dropout)),
        generator_(generator.next()) {}

  // (max_len, num_hiddens)
  const Matrix<Scalar>& P() const { return P_; }
  Index num_hiddens() const { return P_.cols(); }
  Index max_len() const { return P_.rows(); }
  Scalar dropout() const { return dropout_; }
  Generator& generator() { return generator_; }

  // Empty, as d2l's PositionalEncoding's; load_state_dict accepts only an empty dict. See state_dict.hpp.
  StateDict<Scalar> state_dict() const {
    return detail::state_dict_of<Scalar>(*this, "PositionalEncoding::state_dict");
  }
  void load_state_dict(const StateDict<Scalar>& dict) {
    detail::load_state_dict_into(*this, dict, "PositionalEncoding::load_state_dict");
  }
  // No parameter to visit: P is not one.
  template <class Visit>
  void visit_parameters(Visit&&) const {}

  // X (batch, steps, num_hiddens) -> X + P[:steps], then dropout in training mode; steps <= max_len. X is a Tensor3
  // or a map of one (TensorMap3, ConstTensorMap3), read in place, as dY below.
  template <class Input>
  Tensor3<Scalar> operator()(const Input& input) {
    const ConstTensorMap3<Scalar> X = detail::input3<Scalar>(input);
    detail::require_dim(X, 2, num_hiddens(), "PositionalEncoding", "X", "features (num_hiddens)");
    detail::require(X.dimension(1) <= max_len(), "PositionalEncoding: X has ", X.dimension(1),
                    " steps, more than max_len (", max_len(), "), shape ", detail::shape_text(X.dimensions()));
    const Index steps = X.dimension(1);
    Tensor3<Scalar> Y(X.dimensions());  // (batch, steps, num_hiddens)
    for (Index b = 0; b < X.dimension(0); ++b) {
      auto y = detail::slice(Y, b);  // (steps, num_hiddens)
      y.noalias() = detail::slice(X, b) + P_.topRows(steps);
    }
    // The record for backward(): dY/dX, 1 outside training, dropout's factors in it.
    dropout_factors_.resize(Y.dimensions());
    if (is_training() && dropout_ > Scalar(0)) {
      auto flat = detail::as_matrix(Y);
      detail::dropout_inplace(flat, dropout_, generator_, dropout_factors_.data());
    } else {
      dropout_factors_.setConstant(Scalar(1));
    }
    recorded_ = true;
    return Y;
  }

  // dY: (batch, steps, num_hiddens), the gradient of the last operator() call's output -> dX, the same shape:
  // dY times the factor that call's dropout gave each entry (0, or 1 / (1 - p)). Throws std::logic_error when no
  // call was recorded, std::invalid_argument when dY has another shape.
  template <class GradOutput>
  Tensor3<Scalar> backward(const GradOutput& grad_output) const {
    constexpr const char* where = "PositionalEncoding::backward";
    const ConstTensorMap3<Scalar> dY = detail::input3<Scalar>(grad_output);
    detail::require_recorded(recorded_, where, "PositionalEncoding");
    const auto& d = dropout_factors_.dimensions();
    detail::require_shape(dY, {d[0], d[1], d[2]}, where, "grad_output", "(batch, steps, num_hiddens)");
    Tensor3<Scalar> dX = dY * dropout_factors_;  // (batch, steps, num_hiddens)
    return dX;
  }

  // No parameter, so nothing to zero and an empty list.
  void zero_grad() {}
  std::vector<Parameter<Scalar>> parameters() { return {}; }

 private:
  static Scalar checked_dropout(Scalar dropout) {
    detail::require_probability(dropout, "PositionalEncoding");
    return dropout;
  }

  Matrix<Scalar> P_;  // (max_len, num_hiddens)
  Scalar dropout_;
  Generator generator_;
  Tensor3<Scalar> dropout_factors_;  // (batch, steps, num_hiddens) of the last operator() call: dY/dX
  bool recorded_ = false;
};

}  // namespace ATTEND_ABI
}  // namespace attend
