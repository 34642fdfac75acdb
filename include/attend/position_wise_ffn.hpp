// attend/position_wise_ffn.hpp — the position-wise feed-forward network of d2l's Transformer.
//
//   Y = dense2(f(dense1(X)))        dense1: ffn_num_input -> ffn_num_hiddens, dense2: ffn_num_hiddens -> outputs
//
// The same two Linear layers at every position (every (batch, step) row); f is ReLU in d2l and in PyTorch's
// nn.TransformerEncoderLayer by default (activation.hpp lists the others). Parameters drawn dense1 then dense2;
// state_dict(): dense1.weight, dense1.bias, dense2.weight, dense2.bias (d2l's names). operator() keeps X and
// dense1's output for backward(); forward() const keeps nothing.
// Of bfloat16, evaluation only: its Linear layers' products in float and the activation in float, each result
// rounded to bfloat16 once; operator() keeps nothing and backward() does not compile.
#pragma once

#include <attend/config.hpp>

#include <attend/activation.hpp>
#include <attend/detail/views.hpp>
#include <attend/linear.hpp>
#include <attend/module.hpp>
#include <attend/parameter.hpp>
#include <attend/random.hpp>
#include <attend/tensor.hpp>

namespace attend {
inline namespace ATTEND_ABI {

template <class Scalar>
class PositionWiseFFN : public Module, public detail::WithParameters<PositionWiseFFN<Scalar>, Scalar> {
 public:
  PositionWiseFFN(Index ffn_num_input, Index ffn_num_hiddens, Index ffn_num_outputs,
                  Activation activation = Activation::relu, Generator& generator = default_generator())
      : activation_(checked(activation, ffn_num_input, ffn_num_hiddens, ffn_num_outputs)),
        dense1_(ffn_num_input, ffn_num_hiddens, true, generator),
        dense2_(ffn_num_hiddens, ffn_num_outputs, true, generator) {}

  Linear<Scalar>& dense1() { return dense1_; }  // (ffn_num_hiddens, ffn_num_input)
  const Linear<Scalar>& dense1() const { return dense1_; }
  Linear<Scalar>& dense2() { return dense2_; }  // (ffn_num_outputs, ffn_num_hiddens)
  const Linear<Scalar>& dense2() const { return dense2_; }
  Activation activation() const { return activation_; }

  // X (batch, steps, ffn_num_input) -> (batch, steps, ffn_num_outputs); keeps X and dense1(X).
  template <class Input>
  Tensor3<Scalar> operator()(const Input& input) {
    if constexpr (detail::is_reduced<Scalar>) return forward(input);  // evaluation only: nothing to keep
    const ConstTensorMap3<Scalar> X = detail::input3<Scalar>(input);
    check_input(X, "PositionWiseFFN");
    Tensor3<Scalar> H = dense1_.forward(X);  // (batch, steps, ffn_num_hiddens), before the activation
    Tensor3<Scalar> A(H.dimensions());       // (batch, steps, ffn_num_hiddens)
    detail::activate(activation_, H.data(), A.data(), A.size());
    Tensor3<Scalar> Y = dense2_.forward(A);  // (batch, steps, ffn_num_outputs)
    recorded_input_ = X;
    recorded_hidden_ = std::move(H);
    recorded_ = true;
    return Y;
  }

  // The same output, keeping nothing.
  template <class Input>
  Tensor3<Scalar> forward(const Input& input) const {
    const ConstTensorMap3<Scalar> X = detail::input3<Scalar>(input);
    check_input(X, "PositionWiseFFN::forward");
    Tensor3<Scalar> A = dense1_.forward(X);  // (batch, steps, ffn_num_hiddens)
    detail::activate(activation_, A.data(), A.data(), A.size());
    return dense2_.forward(A);
  }

  // dY (batch, steps, ffn_num_outputs), the gradient of the last operator() call's output -> dX (batch, steps,
  // ffn_num_input); adds both layers' parameter gradients. Throws std::logic_error when no call was recorded,
  // std::invalid_argument for another shape.
  template <class GradOutput>
  Tensor3<Scalar> backward(const GradOutput& grad_output) {
    static_assert(!detail::is_reduced<Scalar>,
                  "attend: PositionWiseFFN<bfloat16> runs in evaluation only; train in float");
    if constexpr (!detail::is_reduced<Scalar>) {  // the body of float and double only
      constexpr const char* where = "PositionWiseFFN::backward";
      const ConstTensorMap3<Scalar> dY = detail::input3<Scalar>(grad_output);
      detail::require_recorded(recorded_, where, "PositionWiseFFN");
      this->require_gradients(where);
      const Tensor3<Scalar>& X = recorded_input_;   // (batch, steps, ffn_num_input)
      const Tensor3<Scalar>& H = recorded_hidden_;  // (batch, steps, ffn_num_hiddens)
      detail::require_shape(dY, {X.dimension(0), X.dimension(1), dense2_.out_features()}, where, "grad_output",
                            "(batch, steps, ffn_num_outputs)");
      Tensor3<Scalar> A(H.dimensions());  // (batch, steps, ffn_num_hiddens): f(H), dense2's input, again
      detail::activate(activation_, H.data(), A.data(), A.size());
      Tensor3<Scalar> dH(H.dimensions());  // (batch, steps, ffn_num_hiddens): dA, then dH = dA f'(H)
      dense2_.backward_rows(detail::as_matrix(A), detail::as_matrix(dY), dH.data());
      detail::activation_backward(activation_, H.data(), dH.data(), dH.data(), dH.size());
      Tensor3<Scalar> dX(X.dimensions());  // (batch, steps, ffn_num_input)
      dense1_.backward_rows(detail::as_matrix(X), detail::as_matrix(dH), dX.data());
      return dX;
    } else {
      return {};  // not reached: the assertion stops the build
    }
  }

 private:
  friend class detail::WithParameters<PositionWiseFFN<Scalar>, Scalar>;
  static constexpr const char* module_name = "PositionWiseFFN";

  void check_input(const ConstTensorMap3<Scalar>& X, const char* where) const {
    this->require_gradients(where);
    detail::require_dim(X, 2, dense1_.in_features(), where, "X", "features (ffn_num_input)");
  }

  template <class Self, class Visit>
  static void visit_with_gradients_of(Self& self, Visit& visit) {
    self.dense1_.visit_with_gradients(detail::prefixed("dense1.", visit));
    self.dense2_.visit_with_gradients(detail::prefixed("dense2.", visit));
  }

  // Every argument, checked before any parameter is drawn: a constructor that throws leaves the generator as it was.
  static Activation checked(Activation activation, Index ffn_num_input, Index ffn_num_hiddens, Index ffn_num_outputs) {
    detail::require_at_least(ffn_num_input, 1, "PositionWiseFFN", "ffn_num_input");
    detail::require_at_least(ffn_num_hiddens, 1, "PositionWiseFFN", "ffn_num_hiddens");
    detail::require_at_least(ffn_num_outputs, 1, "PositionWiseFFN", "ffn_num_outputs");
    return detail::checked_activation(activation, "PositionWiseFFN");
  }

  Activation activation_;
  Linear<Scalar> dense1_;
  Linear<Scalar> dense2_;
  Tensor3<Scalar> recorded_input_;   // (batch, steps, ffn_num_input): the last operator() call's X
  Tensor3<Scalar> recorded_hidden_;  // (batch, steps, ffn_num_hiddens): its dense1(X)
  bool recorded_ = false;
};

}  // namespace ATTEND_ABI
}  // namespace attend
