// attend/add_norm.hpp — d2l's AddNorm: the residual connection followed by layer normalization.
//
//   Z = X + dropout(Y),  out = ln(Z)         X, Y, out: (batch, steps, normalized_shape)
//
// The sum and its normalisation run in one pass over each row (detail/normalization.hpp), not as two tensors.
// Dropout in training mode, from the module's own generator; state_dict(): ln.weight, ln.bias. operator() keeps
// Z, the rows' statistics and the dropout factors for backward(), which returns both inputs' gradients:
// dX = dZ, dY = dZ * factors (dZ the normalisation's input gradient).
#pragma once

#include <attend/config.hpp>

#include <attend/detail/views.hpp>
#include <attend/dropout.hpp>
#include <attend/layer_norm.hpp>
#include <attend/module.hpp>
#include <attend/parameter.hpp>
#include <attend/random.hpp>
#include <attend/tensor.hpp>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {

// The gradients with respect to AddNorm's two inputs, each of its input's shape.
template <class Scalar>
struct AddNormGradients {
  Tensor3<Scalar> X, Y;
};

template <class Scalar>
class AddNorm : public Module, public detail::WithParameters<AddNorm<Scalar>, Scalar> {
 public:
  AddNorm(Index normalized_shape, Scalar dropout, Scalar eps = Scalar(1e-5), Generator& generator = default_generator())
      : dropout_(checked_dropout(dropout)), ln_(normalized_shape, eps), generator_(generator.next()) {}

  LayerNorm<Scalar>& ln() { return ln_; }
  const LayerNorm<Scalar>& ln() const { return ln_; }
  Scalar dropout() const { return dropout_; }
  Generator& generator() { return generator_; }

  // X, Y (batch, steps, normalized_shape) -> ln(X + dropout(Y)), the same shape; keeps what backward() needs.
  template <class InputX, class InputY>
  Tensor3<Scalar> operator()(const InputX& input_x, const InputY& input_y) {
    const ConstTensorMap3<Scalar> X = detail::input3<Scalar>(input_x), Y = detail::input3<Scalar>(input_y);
    check(X, Y, "AddNorm");
    const Index rows = X.dimension(0) * X.dimension(1);
    const bool drop = is_training() && dropout_ > Scalar(0);
    factors_.resize(drop ? X.size() : 0);
    if (drop) detail::dropout_factors(factors_.data(), X.size(), dropout_, generator_);
    Tensor3<Scalar> out(X.dimensions());  // (batch, steps, normalized_shape)
    recorded_sum_.resize(X.dimensions());
    mean_.resize(rows);
    rstd_.resize(rows);
    ln_.apply_rows(X.data(), Y.data(), drop ? factors_.data() : nullptr, rows, recorded_sum_.data(), out.data(),
                   mean_.data(), rstd_.data());
    recorded_ = true;
    return out;
  }

  // The evaluation-mode output (no dropout), keeping nothing.
  template <class InputX, class InputY>
  Tensor3<Scalar> forward(const InputX& input_x, const InputY& input_y) const {
    const ConstTensorMap3<Scalar> X = detail::input3<Scalar>(input_x), Y = detail::input3<Scalar>(input_y);
    check(X, Y, "AddNorm::forward");
    Tensor3<Scalar> out(X.dimensions());  // (batch, steps, normalized_shape)
    ln_.apply_rows(X.data(), Y.data(), nullptr, X.dimension(0) * X.dimension(1), nullptr, out.data(), nullptr, nullptr);
    return out;
  }

  // dout (batch, steps, normalized_shape), the gradient of the last operator() call's output -> {dX, dY}; adds into
  // ln()'s weight_grad() and bias_grad(). Throws std::logic_error when no call was recorded, std::invalid_argument
  // for another shape.
  template <class GradOutput>
  AddNormGradients<Scalar> backward(const GradOutput& grad_output) {
    constexpr const char* where = "AddNorm::backward";
    const ConstTensorMap3<Scalar> dout = detail::input3<Scalar>(grad_output);
    detail::require_recorded(recorded_, where, "AddNorm");
    this->require_gradients(where);
    const Tensor3<Scalar>& Z = recorded_sum_;  // (batch, steps, normalized_shape)
    detail::require_shape(dout, {Z.dimension(0), Z.dimension(1), Z.dimension(2)}, where, "grad_output",
                          "(batch, steps, normalized_shape)");
    AddNormGradients<Scalar> g{Tensor3<Scalar>(Z.dimensions()), Tensor3<Scalar>()};
    ln_.backward_rows(Z.data(), dout.data(), Z.dimension(0) * Z.dimension(1), mean_.data(), rstd_.data(), g.X.data());
    g.Y = g.X;
    for (Index i = 0; i < factors_.size(); ++i) g.Y.data()[i] *= factors_[i];
    return g;
  }

 private:
  friend class detail::WithParameters<AddNorm<Scalar>, Scalar>;
  static constexpr const char* module_name = "AddNorm";

  void check(const ConstTensorMap3<Scalar>& X, const ConstTensorMap3<Scalar>& Y, const char* where) const {
    ln_.check_input(X, where);
    detail::require_shape(Y, {X.dimension(0), X.dimension(1), X.dimension(2)}, where, "Y", "(X's shape)");
  }

  template <class Self, class Visit>
  static void visit_with_gradients_of(Self& self, Visit& visit) {
    self.ln_.visit_with_gradients(detail::prefixed("ln.", visit));
  }

  static Scalar checked_dropout(Scalar dropout) {
    detail::require_probability(dropout, "AddNorm");
    return dropout;
  }

  Scalar dropout_;
  LayerNorm<Scalar> ln_;
  Generator generator_;
  Tensor3<Scalar> recorded_sum_;  // (batch, steps, normalized_shape): the last operator() call's X + dropout(Y)
  Vector<Scalar> mean_, rstd_;    // (batch * steps): its rows' statistics
  Vector<Scalar> factors_;        // (batch * steps * normalized_shape): its dropout factors, empty without dropout
  bool recorded_ = false;
};

}  // namespace ATTEND_ABI
}  // namespace attend
