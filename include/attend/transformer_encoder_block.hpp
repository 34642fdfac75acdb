// attend/transformer_encoder_block.hpp — one Transformer encoder block: d2l's (post-norm) or PyTorch's pre-norm.
//
//   post-norm (d2l; nn.TransformerEncoderLayer's default):   Y = addnorm1(X, attention(X, X, X, mask))
//                                                              out = addnorm2(Y, ffn(Y))
//   pre-norm (norm_first; nn.TransformerEncoderLayer(norm_first=True)):
//                                                              Y = X + dropout(attention(N, N, N, mask)), N = ln1(X)
//                                                              out = Y + dropout(ffn(ln2(Y)))
//
// ln1 and ln2 are addnorm1.ln and addnorm2.ln in both forms, so one state dict serves both; in the pre-norm form the
// residual dropout is drawn from the AddNorm's generator. attention: MultiHeadAttention(num_hiddens x 4,
// num_heads, dropout, use_bias); ffn: PositionWiseFFN(num_hiddens, ffn_num_hiddens, num_hiddens, activation).
// PyTorch's layer also drops out inside its feed-forward network (between the activation and linear2), which d2l's
// block does not: in evaluation mode the two agree exactly, in training mode their dropout differs there.
// state_dict(): attention.W_q.weight, ..., addnorm1.ln.weight, addnorm1.ln.bias, ffn.dense1.weight, ...,
// addnorm2.ln.bias (d2l's names; transformer_encoder_layer_from_torch in from_torch.hpp maps PyTorch's).
#pragma once

#include <attend/config.hpp>

#include <attend/activation.hpp>
#include <attend/add_norm.hpp>
#include <attend/detail/views.hpp>
#include <attend/dropout.hpp>
#include <attend/mask.hpp>
#include <attend/module.hpp>
#include <attend/multi_head_attention.hpp>
#include <attend/parameter.hpp>
#include <attend/position_wise_ffn.hpp>
#include <attend/random.hpp>
#include <attend/tensor.hpp>
#include <cmath>
#include <utility>

namespace attend {
inline namespace ATTEND_ABI {

template <class Scalar>
class TransformerEncoderBlock : public detail::WithParameters<TransformerEncoderBlock<Scalar>, Scalar> {
 public:
  // Parameters drawn attention (W_q, W_k, W_v, W_o), then ffn (dense1, dense2), as d2l's block builds them.
  TransformerEncoderBlock(Index num_hiddens, Index ffn_num_hiddens, Index num_heads, Scalar dropout,
                          bool use_bias = false, Activation activation = Activation::relu, bool norm_first = false,
                          Scalar eps = Scalar(1e-5), Generator& generator = default_generator())
      : norm_first_(norm_first),
        attention_(checked(num_hiddens, ffn_num_hiddens, num_heads, dropout, activation, eps), num_hiddens, num_hiddens,
                   num_hiddens, num_heads, dropout, use_bias, generator),
        addnorm1_(num_hiddens, dropout, eps, generator),
        ffn_(num_hiddens, ffn_num_hiddens, num_hiddens, activation, generator),
        addnorm2_(num_hiddens, dropout, eps, generator) {}

  MultiHeadAttention<Scalar>& attention() { return attention_; }
  AddNorm<Scalar>& addnorm1() { return addnorm1_; }
  PositionWiseFFN<Scalar>& ffn() { return ffn_; }
  AddNorm<Scalar>& addnorm2() { return addnorm2_; }
  const MultiHeadAttention<Scalar>& attention() const { return attention_; }
  const AddNorm<Scalar>& addnorm1() const { return addnorm1_; }
  const PositionWiseFFN<Scalar>& ffn() const { return ffn_; }
  const AddNorm<Scalar>& addnorm2() const { return addnorm2_; }
  bool norm_first() const { return norm_first_; }
  Index num_hiddens() const { return attention_.num_hiddens(); }

  // Training or evaluation mode for the block and every part of it.
  void train(bool training = true) {
    training_ = training;
    attention_.train(training);
    addnorm1_.train(training);
    ffn_.train(training);
    addnorm2_.train(training);
  }
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // X (batch, steps, num_hiddens) -> (batch, steps, num_hiddens); mask: the attention's (none, valid lengths,
  // causal, keep, ...). Records what backward() needs in the parts.
  template <class Input>
  Tensor3<Scalar> operator()(const Input& input, const Mask& mask = {}) {
    const ConstTensorMap3<Scalar> X = detail::input3<Scalar>(input);
    check(X, mask, "TransformerEncoderBlock");
    if (!norm_first_) {
      const Tensor3<Scalar> Y = addnorm1_(X, attention_(X, X, X, mask));  // (batch, steps, num_hiddens)
      return addnorm2_(Y, ffn_(Y));
    }
    const Tensor3<Scalar> N1 = addnorm1_.ln()(X);      // (batch, steps, num_hiddens)
    Tensor3<Scalar> Y = attention_(N1, N1, N1, mask);  // then X + dropout(attention)
    residual(X.data(), Y, factors1_, addnorm1_);
    Tensor3<Scalar> out = ffn_(addnorm2_.ln()(Y));  // then Y + dropout(ffn)
    residual(Y.data(), out, factors2_, addnorm2_);
    return out;
  }

  // The evaluation-mode output, keeping nothing.
  template <class Input>
  Tensor3<Scalar> forward(const Input& input, const Mask& mask = {}) const {
    const ConstTensorMap3<Scalar> X = detail::input3<Scalar>(input);
    check(X, mask, "TransformerEncoderBlock::forward");
    if (!norm_first_) {
      const Tensor3<Scalar> Y = addnorm1_.forward(X, attention_.forward(X, X, X, mask));
      return addnorm2_.forward(Y, ffn_.forward(Y));
    }
    const Tensor3<Scalar> N1 = addnorm1_.ln().forward(X);  // (batch, steps, num_hiddens)
    Tensor3<Scalar> Y = attention_.forward(N1, N1, N1, mask);
    detail::as_matrix(Y) += detail::as_matrix(X);
    Tensor3<Scalar> out = ffn_.forward(addnorm2_.ln().forward(Y));
    detail::as_matrix(out) += detail::as_matrix(Y);
    return out;
  }

  // dout (batch, steps, num_hiddens), the gradient of the last operator() call's output -> dX; adds every
  // parameter's gradient. Throws std::logic_error when no call was recorded, std::invalid_argument for another shape.
  template <class GradOutput>
  Tensor3<Scalar> backward(const GradOutput& grad_output) {
    const ConstTensorMap3<Scalar> dout = detail::input3<Scalar>(grad_output);
    if (!norm_first_) {
      const AddNormGradients<Scalar> g2 = addnorm2_.backward(dout);
      Tensor3<Scalar> dY = ffn_.backward(g2.Y);  // (batch, steps, num_hiddens), then plus the residual's
      detail::as_matrix(dY) += detail::as_matrix(g2.X);
      const AddNormGradients<Scalar> g1 = addnorm1_.backward(dY);
      Tensor3<Scalar> dX = self_attention_gradient(g1.Y);
      detail::as_matrix(dX) += detail::as_matrix(g1.X);
      return dX;
    }
    // Pre-norm: dY = dout + ln2'(ffn'(dout f2)), dX = dY + ln1'(attention'(dY f1)).
    Tensor3<Scalar> dF = scaled(dout, factors2_);  // (batch, steps, num_hiddens)
    Tensor3<Scalar> dY = addnorm2_.ln().backward(ffn_.backward(dF));
    detail::as_matrix(dY) += detail::as_matrix(dout);
    Tensor3<Scalar> dX = addnorm1_.ln().backward(self_attention_gradient(scaled(dY, factors1_)));
    detail::as_matrix(dX) += detail::as_matrix(dY);
    return dX;
  }

 private:
  friend class detail::WithParameters<TransformerEncoderBlock<Scalar>, Scalar>;
  static constexpr const char* module_name = "TransformerEncoderBlock";

  void check(const ConstTensorMap3<Scalar>& X, const Mask& mask, const char* where) const {
    detail::require_dim(X, 2, num_hiddens(), where, "X", "features (num_hiddens)");
    mask.require_shape(X.dimension(0), X.dimension(1), X.dimension(1), where);
    this->require_gradients(where);
  }

  // The gradient of attention(X, X, X): the three inputs' gradients added.
  Tensor3<Scalar> self_attention_gradient(const Tensor3<Scalar>& grad_output) {
    AttentionGradients<Scalar> g = attention_.backward(grad_output);
    detail::as_matrix(g.queries) += detail::as_matrix(g.keys) + detail::as_matrix(g.values);
    return std::move(g.queries);
  }

  // Y = X + dropout(Y) in place, the dropout factors drawn from `norm`'s generator into `factors` (empty: none).
  void residual(const Scalar* X, Tensor3<Scalar>& Y, Vector<Scalar>& factors, AddNorm<Scalar>& norm) {
    const bool drop = training_ && norm.dropout() > Scalar(0);
    factors.resize(drop ? Y.size() : 0);
    if (drop) detail::dropout_factors(factors.data(), Y.size(), norm.dropout(), norm.generator());
    for (Index i = 0; i < Y.size(); ++i) Y.data()[i] = X[i] + (drop ? Y.data()[i] * factors[i] : Y.data()[i]);
  }

  // dY * factors (dY itself when there are none).
  static Tensor3<Scalar> scaled(const ConstTensorMap3<Scalar>& dY, const Vector<Scalar>& factors) {
    Tensor3<Scalar> out = dY;  // dY's shape
    for (Index i = 0; i < factors.size(); ++i) out.data()[i] *= factors[i];
    return out;
  }
  static Tensor3<Scalar> scaled(const Tensor3<Scalar>& dY, const Vector<Scalar>& factors) {
    return scaled(ConstTensorMap3<Scalar>(dY.data(), dY.dimensions()), factors);
  }

  template <class Self, class Visit>
  static void visit_with_gradients_of(Self& self, Visit& visit) {
    self.attention_.visit_with_gradients(detail::prefixed("attention.", visit));
    self.addnorm1_.visit_with_gradients(detail::prefixed("addnorm1.", visit));
    self.ffn_.visit_with_gradients(detail::prefixed("ffn.", visit));
    self.addnorm2_.visit_with_gradients(detail::prefixed("addnorm2.", visit));
  }

  // Every size, checked before any parameter is drawn; returns num_hiddens.
  static Index checked(Index num_hiddens, Index ffn_num_hiddens, Index num_heads, Scalar dropout, Activation activation,
                       Scalar eps) {
    constexpr const char* where = "TransformerEncoderBlock";
    detail::require_at_least(num_hiddens, 1, where, "num_hiddens");
    detail::require_at_least(ffn_num_hiddens, 1, where, "ffn_num_hiddens");
    detail::require_at_least(num_heads, 1, where, "num_heads");
    detail::require(num_hiddens % num_heads == 0, where, ": num_hiddens (", num_hiddens,
                    ") must be divisible by num_heads (", num_heads, ")");
    detail::require_probability(dropout, where);
    detail::checked_activation(activation, where);
    detail::require(std::isfinite(eps) && eps >= Scalar(0), where, ": eps must be finite and at least 0, got ", eps);
    return num_hiddens;
  }

  bool training_ = true;
  bool norm_first_;
  MultiHeadAttention<Scalar> attention_;
  AddNorm<Scalar> addnorm1_;
  PositionWiseFFN<Scalar> ffn_;
  AddNorm<Scalar> addnorm2_;
  Vector<Scalar> factors1_, factors2_;  // (batch * steps * num_hiddens): pre-norm residual dropout, empty without
};

}  // namespace ATTEND_ABI
}  // namespace attend
