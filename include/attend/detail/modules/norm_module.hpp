// attend/detail/modules/norm_module.hpp — what LayerNorm and RMSNorm share: a weight (and LayerNorm's bias) over
// the last axis, the forward and backward passes of detail/normalization.hpp on (batch, steps, features) tensors,
// and the record of the last operator() call.
//
// Derived (LayerNorm or RMSNorm) inherits it (CRTP) and provides static constexpr const char* module_name.
// Of bfloat16, a norm stores its parameters in bfloat16 and runs in evaluation only: each row computed in float
// (detail/normalization.hpp), operator() keeping nothing, no gradient buffers, backward() not compiling.
#pragma once

#include <attend/config.hpp>

#include <attend/detail/normalization.hpp>
#include <attend/detail/views.hpp>
#include <attend/module.hpp>
#include <attend/parameter.hpp>
#include <attend/tensor.hpp>
#include <cmath>
#include <string>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

template <class Derived, class Scalar, NormKind kind>
class NormModule : public Module, public WithParameters<Derived, Scalar> {
 public:
  static constexpr bool has_bias = kind == NormKind::layer;

  // weight (features), initialised to 1; bias (features, LayerNorm only), to 0: PyTorch's initialisation.
  NormModule(Index features, Scalar eps)
      : features_(checked_features(features)),
        eps_(checked_eps(eps)),
        weight_(Vector<Scalar>::Ones(features)),
        bias_(Vector<Scalar>::Zero(has_bias ? features : 0)),
        weight_grad_(Vector<Scalar>::Zero(gradient_size<Scalar>(features))),
        bias_grad_(Vector<Scalar>::Zero(gradient_size<Scalar>(has_bias ? features : 0))) {}

  Vector<Scalar>& weight() { return weight_; }  // (features)
  const Vector<Scalar>& weight() const { return weight_; }
  Vector<Scalar>& weight_grad() { return weight_grad_; }  // (features)
  const Vector<Scalar>& weight_grad() const { return weight_grad_; }
  Index normalized_shape() const { return features_; }
  Scalar eps() const { return eps_; }

  // X (batch, steps, features) -> (batch, steps, features); keeps X and each row's statistics for backward().
  template <class Input>
  Tensor3<Scalar> operator()(const Input& input) {
    if constexpr (is_reduced<Scalar>) return forward(input);  // evaluation only: nothing to keep
    const ConstTensorMap3<Scalar> X = input3<Scalar>(input);
    check_input(X, Derived::module_name);
    Tensor3<Scalar> Y(X.dimension(0), X.dimension(1), features_);  // (batch, steps, features)
    const Index rows = X.dimension(0) * X.dimension(1);
    recorded_input_.resize(X.dimension(0), X.dimension(1), features_);
    mean_.resize(rows);
    rstd_.resize(rows);
    apply_rows(X.data(), nullptr, nullptr, rows, recorded_input_.data(), Y.data(), mean_.data(), rstd_.data());
    recorded_ = true;
    return Y;
  }

  // The same output, keeping nothing.
  template <class Input>
  Tensor3<Scalar> forward(const Input& input) const {
    const ConstTensorMap3<Scalar> X = input3<Scalar>(input);
    check_input(X, forward_name().c_str());
    Tensor3<Scalar> Y(X.dimension(0), X.dimension(1), features_);  // (batch, steps, features)
    apply_rows(X.data(), nullptr, nullptr, X.dimension(0) * X.dimension(1), nullptr, Y.data(), nullptr, nullptr);
    return Y;
  }
  // The same into out (batch, steps, features), a Tensor3 or a TensorMap3 of the caller's memory; out may be X's
  // own memory (normalised in place).
  template <class Input, class Out>
  void forward(const Input& input, Out&& out_arg) const {
    const std::string where = forward_name();
    const ConstTensorMap3<Scalar> X = input3<Scalar>(input);
    const TensorMap3<Scalar> out = output3<Scalar>(out_arg);
    check_input(X, where.c_str());
    require_shape(out, {X.dimension(0), X.dimension(1), features_}, where.c_str(), "out", "(batch, steps, features)");
    apply_rows(X.data(), nullptr, nullptr, X.dimension(0) * X.dimension(1), nullptr, out.data(), nullptr, nullptr);
  }

  // dY (batch, steps, features), the gradient of the last operator() call's output -> dX; adds into weight_grad()
  // (and bias_grad()). Throws std::logic_error when no call was recorded, std::invalid_argument for another shape.
  template <class GradOutput>
  Tensor3<Scalar> backward(const GradOutput& grad_output) {
    static_assert(!is_reduced<Scalar>, "attend: norms of bfloat16 run in evaluation only; train in float");
    if constexpr (!is_reduced<Scalar>) {  // the body of float and double only
      const std::string where = std::string(Derived::module_name) + "::backward";
      const ConstTensorMap3<Scalar> dY = input3<Scalar>(grad_output);
      require_recorded(recorded_, where.c_str(), Derived::module_name);
      this->require_gradients(where.c_str());
      const Tensor3<Scalar>& X = recorded_input_;  // (batch, steps, features)
      require_shape(dY, {X.dimension(0), X.dimension(1), features_}, where.c_str(), "grad_output",
                    "(batch, steps, features)");
      Tensor3<Scalar> dX(X.dimension(0), X.dimension(1), features_);  // (batch, steps, features)
      backward_rows(X.data(), dY.data(), X.dimension(0) * X.dimension(1), mean_.data(), rstd_.data(), dX.data());
      return dX;
    } else {
      return {};  // not reached: the assertion stops the build
    }
  }

  // For modules built on a norm (AddNorm, the transformer blocks): rows of `features` values, contiguous.
  // Y = norm(X + R F) (R, F: null for no residual or factors 1); Z receives the normalised input when not null;
  // mean and rstd (rows) receive the statistics when not null. Shapes are the caller's to check.
  void apply_rows(const Scalar* X, const Scalar* R, const Scalar* F, Index rows, Scalar* Z, Scalar* Y, Scalar* mean,
                  Scalar* rstd) const {
    normalize_rows(rows_of(rows), X, R, F, Z, Y, mean, rstd);
  }
  // X the normalised input, dY -> dX (may be dY); adds the parameters' gradients.
  void backward_rows(const Scalar* X, const Scalar* dY, Index rows, const Scalar* mean, const Scalar* rstd,
                     Scalar* dX) {
    normalize_rows_backward(rows_of(rows), X, mean, rstd, dY, dX, weight_grad_.data(),
                            has_bias ? bias_grad_.data() : nullptr);
  }

  // Throws unless X has `features` columns and the parameters their shapes. where: the caller.
  void check_input(const ConstTensorMap3<Scalar>& X, const char* where) const {
    this->require_gradients(where);
    require_dim(X, 2, features_, where, "X", "features (normalized_shape)");
  }

 protected:
  Vector<Scalar>& bias_vector() { return bias_; }
  const Vector<Scalar>& bias_vector() const { return bias_; }
  Vector<Scalar>& bias_grad_vector() { return bias_grad_; }
  const Vector<Scalar>& bias_grad_vector() const { return bias_grad_; }

 private:
  friend class WithParameters<Derived, Scalar>;

  NormRows<Scalar> rows_of(Index rows) const {
    return {kind, rows, features_, eps_, weight_.data(), has_bias ? bias_.data() : nullptr};
  }
  static std::string forward_name() { return std::string(Derived::module_name) + "::forward"; }

  // PyTorch's names: weight, then bias.
  template <class Self, class Visit>
  static void visit_with_gradients_of(Self& self, Visit& visit) {
    visit("weight", self.weight_, self.weight_grad_, std::vector<Index>{self.features_});
    if (has_bias) visit("bias", self.bias_, self.bias_grad_, std::vector<Index>{self.features_});
  }

  static Index checked_features(Index features) {
    require_at_least(features, 1, Derived::module_name, "normalized_shape");
    return features;
  }
  static Scalar checked_eps(Scalar eps) {
    const double value = static_cast<double>(eps);
    require(std::isfinite(value) && value >= 0, Derived::module_name, ": eps must be finite and at least 0, got ",
            value);
    return eps;
  }

  Index features_;
  Scalar eps_;
  Vector<Scalar> weight_;           // (features)
  Vector<Scalar> bias_;             // (features), empty for RMSNorm
  Vector<Scalar> weight_grad_;      // (features)
  Vector<Scalar> bias_grad_;        // (features), empty for RMSNorm
  Tensor3<Scalar> recorded_input_;  // (batch, steps, features): the last operator() call's X
  Vector<Scalar> mean_, rstd_;      // (batch * steps): its rows' statistics
  bool recorded_ = false;
};

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
