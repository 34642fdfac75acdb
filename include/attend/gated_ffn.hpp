// attend/gated_ffn.hpp — the gated feed-forward network of Llama, Mistral and Qwen (transformers' LlamaMLP).
//
//   Y = down_proj(f(gate_proj(X)) * up_proj(X))      gate_proj, up_proj: num_hiddens -> ffn_num_hiddens,
//                                                     down_proj: ffn_num_hiddens -> num_hiddens; * elementwise
//
// f is SiLU in Llama (SwiGLU), tanh GELU in Gemma (GeGLU). Parameters drawn gate_proj, up_proj, down_proj;
// state_dict(): gate_proj.weight, up_proj.weight, down_proj.weight (and .bias of each when bias is on):
// transformers' names. operator() keeps X, gate_proj(X) and up_proj(X) for backward(); forward() const keeps nothing.
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
class GatedFFN : public Module, public detail::WithParameters<GatedFFN<Scalar>, Scalar> {
 public:
  GatedFFN(Index num_hiddens, Index ffn_num_hiddens, Activation activation = Activation::silu, bool bias = false,
           Generator& generator = default_generator())
      : activation_(checked(activation, num_hiddens, ffn_num_hiddens)),
        gate_proj_(num_hiddens, ffn_num_hiddens, bias, generator),
        up_proj_(num_hiddens, ffn_num_hiddens, bias, generator),
        down_proj_(ffn_num_hiddens, num_hiddens, bias, generator) {}

  Linear<Scalar>& gate_proj() { return gate_proj_; }  // (ffn_num_hiddens, num_hiddens)
  Linear<Scalar>& up_proj() { return up_proj_; }      // (ffn_num_hiddens, num_hiddens)
  Linear<Scalar>& down_proj() { return down_proj_; }  // (num_hiddens, ffn_num_hiddens)
  const Linear<Scalar>& gate_proj() const { return gate_proj_; }
  const Linear<Scalar>& up_proj() const { return up_proj_; }
  const Linear<Scalar>& down_proj() const { return down_proj_; }
  Activation activation() const { return activation_; }

  // X (batch, steps, num_hiddens) -> (batch, steps, num_hiddens); keeps X, gate_proj(X) and up_proj(X).
  template <class Input>
  Tensor3<Scalar> operator()(const Input& input) {
    if constexpr (detail::is_reduced<Scalar>) return forward(input);  // evaluation only: nothing to keep
    const ConstTensorMap3<Scalar> X = detail::input3<Scalar>(input);
    check_input(X, "GatedFFN");
    Tensor3<Scalar> G = gate_proj_.forward(X);  // (batch, steps, ffn_num_hiddens)
    Tensor3<Scalar> U = up_proj_.forward(X);    // (batch, steps, ffn_num_hiddens)
    Tensor3<Scalar> A(G.dimensions());          // (batch, steps, ffn_num_hiddens): f(G) * U
    gate(G, U, A);
    Tensor3<Scalar> Y = down_proj_.forward(A);  // (batch, steps, num_hiddens)
    recorded_input_ = X;
    recorded_gate_ = std::move(G);
    recorded_up_ = std::move(U);
    recorded_ = true;
    return Y;
  }

  // The same output, keeping nothing.
  template <class Input>
  Tensor3<Scalar> forward(const Input& input) const {
    const ConstTensorMap3<Scalar> X = detail::input3<Scalar>(input);
    check_input(X, "GatedFFN::forward");
    Tensor3<Scalar> G = gate_proj_.forward(X);      // (batch, steps, ffn_num_hiddens), then f(G) * U
    const Tensor3<Scalar> U = up_proj_.forward(X);  // (batch, steps, ffn_num_hiddens)
    gate(G, U, G);
    return down_proj_.forward(G);
  }

  // dY (batch, steps, num_hiddens), the gradient of the last operator() call's output -> dX; adds the three
  // layers' parameter gradients. Throws std::logic_error when no call was recorded, std::invalid_argument for
  // another shape.
  template <class GradOutput>
  Tensor3<Scalar> backward(const GradOutput& grad_output) {
    static_assert(!detail::is_reduced<Scalar>, "attend: GatedFFN<bfloat16> runs in evaluation only; train in float");
    if constexpr (!detail::is_reduced<Scalar>) {  // the body of float and double only
      constexpr const char* where = "GatedFFN::backward";
      const ConstTensorMap3<Scalar> dY = detail::input3<Scalar>(grad_output);
      detail::require_recorded(recorded_, where, "GatedFFN");
      this->require_gradients(where);
      const Tensor3<Scalar>& X = recorded_input_;  // (batch, steps, num_hiddens)
      const Tensor3<Scalar>& G = recorded_gate_;   // (batch, steps, ffn_num_hiddens)
      const Tensor3<Scalar>& U = recorded_up_;     // (batch, steps, ffn_num_hiddens)
      detail::require_shape(dY, {X.dimension(0), X.dimension(1), X.dimension(2)}, where, "grad_output",
                            "(batch, steps, num_hiddens)");
      Tensor3<Scalar> F(G.dimensions());  // (batch, steps, ffn_num_hiddens): f(G), once for A and for dU
      detail::activate(activation_, G.data(), F.data(), F.size());
      Tensor3<Scalar> A(G.dimensions());  // (batch, steps, ffn_num_hiddens): down_proj's input, again
      for (Index i = 0; i < A.size(); ++i) A.data()[i] = F.data()[i] * U.data()[i];
      Tensor3<Scalar> dA(G.dimensions());  // (batch, steps, ffn_num_hiddens)
      down_proj_.backward_rows(detail::as_matrix(A), detail::as_matrix(dY), dA.data());
      Tensor3<Scalar> dG(G.dimensions()), dU(G.dimensions());  // (batch, steps, ffn_num_hiddens) each
      detail::for_activation_pieces(activation_, dA.size(), [&](auto f, Index begin, Index end) {
        for (Index i = begin; i < end; ++i) {  // dG = dA U f'(G), dU = dA f(G)
          const Scalar da = dA.data()[i];
          dG.data()[i] = da * U.data()[i] * detail::activation_derivative(f.value, G.data()[i]);
          dU.data()[i] = da * F.data()[i];
        }
      });
      Tensor3<Scalar> dX(X.dimensions());  // (batch, steps, num_hiddens): through gate_proj, then up_proj's added
      gate_proj_.backward_rows(detail::as_matrix(X), detail::as_matrix(dG), dX.data());
      Tensor3<Scalar> dX_up(X.dimensions());  // (batch, steps, num_hiddens)
      up_proj_.backward_rows(detail::as_matrix(X), detail::as_matrix(dU), dX_up.data());
      detail::as_matrix(dX) += detail::as_matrix(dX_up);
      return dX;
    } else {
      return {};  // not reached: the assertion stops the build
    }
  }

 private:
  friend class detail::WithParameters<GatedFFN<Scalar>, Scalar>;
  static constexpr const char* module_name = "GatedFFN";

  // A = f(G) * U, elementwise; A may be G. Of bfloat16: in float, rounded once.
  void gate(const Tensor3<Scalar>& G, const Tensor3<Scalar>& U, Tensor3<Scalar>& A) const {
    using Acc = detail::compute_type<Scalar>;
    const Scalar *g = G.data(), *u = U.data();
    Scalar* y = A.data();
    detail::for_activation_pieces(activation_, A.size(), [&](auto f, Index begin, Index end) {
      for (Index i = begin; i < end; ++i)
        y[i] = Scalar(detail::activate(f.value, static_cast<Acc>(g[i])) * static_cast<Acc>(u[i]));
    });
  }

  void check_input(const ConstTensorMap3<Scalar>& X, const char* where) const {
    this->require_gradients(where);
    detail::require_dim(X, 2, gate_proj_.in_features(), where, "X", "features (num_hiddens)");
  }

  template <class Self, class Visit>
  static void visit_with_gradients_of(Self& self, Visit& visit) {
    self.gate_proj_.visit_with_gradients(detail::prefixed("gate_proj.", visit));
    self.up_proj_.visit_with_gradients(detail::prefixed("up_proj.", visit));
    self.down_proj_.visit_with_gradients(detail::prefixed("down_proj.", visit));
  }

  // Every argument, checked before any parameter is drawn: a constructor that throws leaves the generator as it was.
  static Activation checked(Activation activation, Index num_hiddens, Index ffn_num_hiddens) {
    detail::require_at_least(num_hiddens, 1, "GatedFFN", "num_hiddens");
    detail::require_at_least(ffn_num_hiddens, 1, "GatedFFN", "ffn_num_hiddens");
    return detail::checked_activation(activation, "GatedFFN");
  }

  Activation activation_;
  Linear<Scalar> gate_proj_;
  Linear<Scalar> up_proj_;
  Linear<Scalar> down_proj_;
  Tensor3<Scalar> recorded_input_;  // (batch, steps, num_hiddens): the last operator() call's X
  Tensor3<Scalar> recorded_gate_;   // (batch, steps, ffn_num_hiddens): its gate_proj(X)
  Tensor3<Scalar> recorded_up_;     // (batch, steps, ffn_num_hiddens): its up_proj(X)
  bool recorded_ = false;
};

}  // namespace ATTEND_ABI
}  // namespace attend
