// attend/linear.hpp — a fully connected layer on the last axis, as torch.nn.Linear.
//
//   y = x W^T + b        W: (out_features, in_features), b: (out_features)
//
// Initialised as PyTorch does: W and b uniform in [-1/sqrt(in_features), 1/sqrt(in_features)), W first,
// row by row, then b. state_dict() names them as nn.Linear does: "weight", and "bias" when has_bias().
//
// Training: operator() keeps a copy of its input X for backward(dY), which returns dX = dY W and adds
// dW = dY^T X and db = the column sums of dY into weight_grad() and bias_grad() (PyTorch's .grad accumulation),
// all with X and dY seen as (batch * steps, features). forward() const keeps nothing.
//
// Linear<bfloat16> stores W and b in bfloat16 and runs in evaluation only (detail/bf16_products.hpp: products and
// sums in float, each output rounded once); operator() keeps nothing, backward() does not compile, and
// weight_grad() and bias_grad() are empty. Drawn from a generator, its W and b are a Linear<float>'s from the same
// generator, rounded.
#pragma once

#include <attend/config.hpp>

#include <attend/detail/bf16_products.hpp>
#include <attend/detail/products.hpp>
#include <attend/detail/project_rows.hpp>
#include <attend/detail/views.hpp>
#include <attend/module.hpp>
#include <attend/parameter.hpp>
#include <attend/random.hpp>
#include <attend/state_dict.hpp>
#include <attend/tensor.hpp>
#include <cmath>
#include <string>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

// Y (rows, out), rows ldy apart, = X W^T + bias: W (out, X.cols()) contiguous, bias (out) or null. Every Linear's
// product, on the kernels of its Scalar (bfloat16's: detail/bf16_products.hpp). Shapes are the caller's to check.
template <class Scalar>
void linear_rows(const Eigen::Ref<const Matrix<Scalar>>& X, const Scalar* W, Index out, const Scalar* bias, Scalar* Y,
                 Index ldy) {
  if constexpr (is_reduced<Scalar>)
    project_rows_bf16(X.data(), X.outerStride(), X.rows(), X.cols(), W, out, bias, Y, ldy);
  else
    project_rows<Scalar>(X, {{W, out, bias, Y, ldy}});
}

}  // namespace detail

template <class Scalar>
class Linear : public Module, public detail::WithParameters<Linear<Scalar>, Scalar> {
 public:
  Linear(Index in_features, Index out_features, bool bias = true, Generator& generator = default_generator())
      : in_features_(in_features), out_features_(out_features), has_bias_(bias) {
    detail::require_at_least(in_features, 1, "Linear", "in_features");
    detail::require_at_least(out_features, 1, "Linear", "out_features");
    using Drawn = detail::compute_type<Scalar>;  // bfloat16's values are float's draws, rounded
    const Drawn bound = Drawn(1) / std::sqrt(static_cast<Drawn>(in_features));
    weight_.resize(out_features, in_features);
    for (Index i = 0; i < weight_.size(); ++i) weight_.data()[i] = Scalar(generator.uniform(-bound, bound));
    bias_ = Vector<Scalar>::Zero(bias ? out_features : 0);
    for (Index i = 0; i < bias_.size(); ++i) bias_[i] = Scalar(generator.uniform(-bound, bound));
    // bfloat16 keeps no gradients (parameter.hpp).
    weight_grad_ = Matrix<Scalar>::Zero(detail::gradient_size<Scalar>(out_features),
                                        detail::gradient_size<Scalar>(in_features));
    bias_grad_ = Vector<Scalar>::Zero(detail::gradient_size<Scalar>(bias_.size()));
  }

  Matrix<Scalar>& weight() { return weight_; }  // (out_features, in_features)
  const Matrix<Scalar>& weight() const { return weight_; }
  Vector<Scalar>& bias() { return bias_; }  // (out_features), empty when has_bias() is false
  const Vector<Scalar>& bias() const { return bias_; }
  bool has_bias() const { return has_bias_; }
  Index in_features() const { return in_features_; }
  Index out_features() const { return out_features_; }

  // X: (batch, steps, in_features) -> (batch, steps, out_features); keeps X for backward(). X is a Tensor3 or a map
  // of one (TensorMap3, ConstTensorMap3), read in place, as every tensor argument below.
  template <class Input>
  Tensor3<Scalar> operator()(const Input& input) {
    const ConstTensorMap3<Scalar> X = detail::input3<Scalar>(input);
    if constexpr (detail::is_reduced<Scalar>) return forward(X);  // evaluation only: nothing to keep
    Tensor3<Scalar> Y = forward(X);  // (batch, steps, out_features); throws before anything is kept
    recorded_input_ = X;
    recorded_ = true;
    return Y;
  }

  // The same output, keeping nothing.
  template <class Input>
  Tensor3<Scalar> forward(const Input& input) const {
    const ConstTensorMap3<Scalar> X = detail::input3<Scalar>(input);
    check_input(X, "Linear");
    Tensor3<Scalar> Y(X.dimension(0), X.dimension(1), out_features_);  // (batch, steps, out_features)
    apply(detail::as_matrix(X), detail::as_matrix(Y));
    return Y;
  }
  // The same into out (batch, steps, out_features): a Tensor3 of that shape or a TensorMap3 of the caller's memory,
  // apart from X's.
  template <class Input, class Out>
  void forward(const Input& input, Out&& out_arg) const {
    constexpr const char* where = "Linear::forward";
    const ConstTensorMap3<Scalar> X = detail::input3<Scalar>(input);
    const TensorMap3<Scalar> out = detail::output3<Scalar>(out_arg);
    check_input(X, where);
    detail::require_out<Scalar>(out, {X.dimension(0), X.dimension(1), out_features_}, where,
                                "(batch, steps, out_features)", {{&X, "X"}});
    apply(detail::as_matrix(X), detail::as_matrix(out));
  }

  // dY: (batch, steps, out_features), the gradient of the last operator() call's output -> dX (batch, steps,
  // in_features); adds dW and db into weight_grad() and bias_grad(). Throws std::logic_error when no call was
  // recorded, std::invalid_argument when dY has another shape or a parameter or gradient was resized; a call that
  // throws changes nothing.
  template <class GradOutput>
  Tensor3<Scalar> backward(const GradOutput& grad_output) {
    static_assert(!detail::is_reduced<Scalar>, "attend: Linear<bfloat16> runs in evaluation only; train in float");
    if constexpr (!detail::is_reduced<Scalar>) {  // the body of float and double only
      constexpr const char* where = "Linear::backward";
      const ConstTensorMap3<Scalar> dY = detail::input3<Scalar>(grad_output);
      detail::require_recorded(recorded_, where, "Linear");
      require_parameters(where);
      this->require_gradients(where);
      const Tensor3<Scalar>& X = recorded_input_;  // (batch, steps, in_features)
      detail::require_shape(dY, {X.dimension(0), X.dimension(1), out_features_}, where, "grad_output",
                            "(batch, steps, out_features)");
      Tensor3<Scalar> dX(X.dimension(0), X.dimension(1), in_features_);  // (batch, steps, in_features)
      backward_rows(detail::as_matrix(X), detail::as_matrix(dY), dX.data());
      return dX;
    } else {
      return {};  // not reached: the assertion stops the build
    }
  }

  // The same on rows, for modules built on Linear: X (rows, in_features), the input of the call being
  // differentiated, dY (rows, out_features) -> dX (rows, in_features) contiguous, written in place (null: not wanted);
  // adds dW and db. Shapes are the caller's to check.
  void backward_rows(const Eigen::Ref<const Matrix<Scalar>>& X, const Eigen::Ref<const Matrix<Scalar>>& dY,
                     Scalar* dX) {
    static_assert(!detail::is_reduced<Scalar>, "attend: Linear<bfloat16> runs in evaluation only; train in float");
    if constexpr (!detail::is_reduced<Scalar>) {  // the body of float and double only
      const Index rows = X.rows();
      if (dX != nullptr)  // dX = dY W: (rows, out) x (out, in)
        detail::times<Scalar>(false, dY.data(), dY.outerStride(), rows, out_features_, weight_.data(), in_features_,
                              in_features_, dX, in_features_);
      // This call's dW = dY^T X, (out, rows) x (rows, in), then added, as PyTorch adds a new gradient to .grad; in
      // memory kept between calls (call_weight_grad_).
      Matrix<Scalar>& dW = call_weight_grad_;
      dW.resize(out_features_, in_features_);
      detail::transposed_times<Scalar>(false, dY, X, dW);
      weight_grad_ += dW;
      if (has_bias_ && dY.rows() > 0) bias_grad_ += dY.colwise().sum().transpose();
    }
  }

  // backward() for an input its caller recorded: X (batch, steps, in_features), the input of the call being
  // differentiated, dY (batch, steps, out_features) -> dX; adds dW and db. Shapes are the caller's to check.
  Tensor3<Scalar> backward_from(const Tensor3<Scalar>& X, const Tensor3<Scalar>& dY) {
    Tensor3<Scalar> dX(X.dimension(0), X.dimension(1), in_features_);  // (batch, steps, in_features)
    backward_rows(detail::as_matrix(X), detail::as_matrix(dY), dX.data());
    return dX;
  }

  // The gradients backward() adds to: weight's (out_features, in_features) and bias's (out_features, empty without
  // a bias), zero at construction.
  Matrix<Scalar>& weight_grad() { return weight_grad_; }
  const Matrix<Scalar>& weight_grad() const { return weight_grad_; }
  Vector<Scalar>& bias_grad() { return bias_grad_; }
  const Vector<Scalar>& bias_grad() const { return bias_grad_; }

  // The same on rows: X (rows, in_features) -> Y (rows, out_features), written in place. Checks the parameters
  // (require_parameters) and both shapes; throws std::invalid_argument, leaving Y as it was, when one is wrong.
  void apply(const Eigen::Ref<const Matrix<Scalar>>& X, Eigen::Ref<Matrix<Scalar>> Y) const {
    constexpr const char* where = "Linear::apply";
    require_parameters(where);
    detail::require(X.cols() == in_features_, where, ": X must have ", in_features_, " columns (in_features), got (",
                    X.rows(), ", ", X.cols(), ")");
    detail::require(Y.rows() == X.rows() && Y.cols() == out_features_, where, ": Y must have shape (", X.rows(), ", ",
                    out_features_, ") (X's rows, out_features), got (", Y.rows(), ", ", Y.cols(), ")");
    // Chunks of rows shared among the threads (detail/project_rows.hpp, detail/bf16_products.hpp): the same bits for
    // any number of them.
    detail::linear_rows<Scalar>(X, weight_.data(), out_features_, has_bias_ ? bias_.data() : nullptr, Y.data(),
                                Y.outerStride());
  }

  // zero_grad(), parameters(), state_dict(), load_state_dict(), visit_parameters(), visit_with_gradients() and
  // require_gradients(): detail::WithParameters (parameter.hpp), over these parameters:
  // weight (out_features, in_features), then bias (out_features) when has_bias(): nn.Linear's names and order.

  // Throws unless the parameters still have the shapes given at construction (weight() and bias() hand out
  // references, so they can be resized from outside). `where` names the caller in the message.
  // member: what the layer is called in a module that holds it (" W_q"), after `where` in the message.
  void require_parameters(const char* where, const char* member = "") const {
    detail::require(weight_.rows() == out_features_ && weight_.cols() == in_features_, where, member,
                    ": weight must have shape (", out_features_, ", ", in_features_,
                    ") (out_features, in_features), got (", weight_.rows(), ", ", weight_.cols(), ")");
    const Index bias_size = has_bias_ ? out_features_ : 0;
    detail::require(bias_.size() == bias_size, where, member, ": bias must have shape (", bias_size, ",), got (",
                    bias_.size(), ",)");
  }

 private:
  friend class detail::WithParameters<Linear<Scalar>, Scalar>;
  static constexpr const char* module_name = "Linear";

  void check_input(const ConstTensorMap3<Scalar>& X, const char* where) const {
    require_parameters(where);
    detail::require_dim(X, 2, in_features_, where, "X", "features (in_features)");
  }

  // Calls visit(name, parameter, gradient, shape) for each parameter of self (a Linear or a const one).
  template <class Self, class Visit>
  static void visit_with_gradients_of(Self& self, Visit& visit) {
    visit("weight", self.weight_, self.weight_grad_, std::vector<Index>{self.out_features_, self.in_features_});
    if (self.has_bias_) visit("bias", self.bias_, self.bias_grad_, std::vector<Index>{self.out_features_});
  }

  Index in_features_;
  Index out_features_;
  bool has_bias_;
  Matrix<Scalar> weight_;       // (out_features, in_features)
  Vector<Scalar> bias_;         // (out_features) or empty
  Matrix<Scalar> weight_grad_;       // (out_features, in_features)
  Matrix<Scalar> call_weight_grad_;  // (out_features, in_features): backward_rows' scratch, no state between calls
  Vector<Scalar> bias_grad_;    // (out_features) or empty
  Tensor3<Scalar> recorded_input_;  // (batch, steps, in_features): the last operator() call's X
  bool recorded_ = false;
};

}  // namespace ATTEND_ABI
}  // namespace attend
