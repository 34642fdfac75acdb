// attend/transformer_encoder.hpp — d2l's Transformer encoder: token embeddings scaled by sqrt(num_hiddens), plus
// the sinusoidal positions, through num_blks encoder blocks.
//
//   X = pos_encoding(embedding(tokens) * sqrt(num_hiddens))       tokens (batch, steps) -> (batch, steps, num_hiddens)
//   X = blks[i](X, valid_lens)                                     i = 0 .. num_blks - 1
//
// state_dict(): embedding.weight, blks.block0.attention.W_q.weight, ..., blks.block{i}.addnorm2.ln.bias (d2l's
// names). operator() records in every part; backward(dY) adds every parameter's gradient (tokens have none).
#pragma once

#include <attend/config.hpp>

#include <attend/detail/modules/transformer_sizes.hpp>
#include <attend/detail/views.hpp>
#include <attend/embedding.hpp>
#include <attend/mask.hpp>
#include <attend/parameter.hpp>
#include <attend/positional_encoding.hpp>
#include <attend/random.hpp>
#include <attend/tensor.hpp>
#include <attend/transformer_encoder_block.hpp>
#include <cmath>
#include <string>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {

template <class Scalar>
class TransformerEncoder : public detail::WithParameters<TransformerEncoder<Scalar>, Scalar> {
 public:
  // Parameters drawn embedding, then each block in order. max_len: the longest sequence the positions cover.
  TransformerEncoder(Index vocab_size, Index num_hiddens, Index ffn_num_hiddens, Index num_heads, Index num_blks,
                     Scalar dropout, bool use_bias = false, Index max_len = 1000,
                     Generator& generator = default_generator())
      : embedding_(vocab_size,
                   detail::checked_transformer_sizes("TransformerEncoder", num_hiddens, ffn_num_hiddens, num_heads,
                                                     num_blks, dropout, max_len),
                   generator),
        pos_encoding_(num_hiddens, dropout, max_len, generator) {
    blks_.reserve(static_cast<std::size_t>(num_blks));
    for (Index i = 0; i < num_blks; ++i)
      blks_.emplace_back(num_hiddens, ffn_num_hiddens, num_heads, dropout, use_bias, Activation::relu, false,
                         Scalar(1e-5), generator);
  }

  Embedding<Scalar>& embedding() { return embedding_; }
  PositionalEncoding<Scalar>& pos_encoding() { return pos_encoding_; }
  TransformerEncoderBlock<Scalar>& block(Index i) { return blks_.at(static_cast<std::size_t>(i)); }
  Index num_blks() const { return static_cast<Index>(blks_.size()); }
  Index num_hiddens() const { return embedding_.embedding_dim(); }

  void train(bool training = true) {
    training_ = training;
    embedding_.train(training);
    pos_encoding_.train(training);
    for (auto& blk : blks_) blk.train(training);
  }
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // tokens (batch, steps) -> (batch, steps, num_hiddens); valid_lens (or any Mask) hides padding keys.
  Tensor3<Scalar> operator()(const Matrix<Index>& tokens, const Mask& valid_lens = {}) {
    check(tokens, valid_lens, "TransformerEncoder");
    Tensor3<Scalar> X = pos_encoding_(detail::scaled_by_sqrt_width(embedding_(tokens)));  // (batch, steps, num_hiddens)
    for (auto& blk : blks_) X = blk(X, valid_lens);
    recorded_ = true;
    return X;
  }

  // The evaluation-mode output, keeping nothing.
  Tensor3<Scalar> forward(const Matrix<Index>& tokens, const Mask& valid_lens = {}) const {
    check(tokens, valid_lens, "TransformerEncoder::forward");
    Tensor3<Scalar> X =
        detail::scaled_by_sqrt_width(embedding_.forward(tokens));  // (batch, steps, num_hiddens), plus P
    for (Index b = 0; b < X.dimension(0); ++b) detail::slice(X, b) += pos_encoding_.P().topRows(X.dimension(1));
    for (const auto& blk : blks_) X = blk.forward(X, valid_lens);
    return X;
  }

  // dY (batch, steps, num_hiddens), the gradient of the last operator() call's output: adds every parameter's
  // gradient. Throws std::logic_error when no call was recorded, std::invalid_argument for another shape.
  template <class GradOutput>
  void backward(const GradOutput& grad_output) {
    constexpr const char* where = "TransformerEncoder::backward";
    const ConstTensorMap3<Scalar> dY = detail::input3<Scalar>(grad_output);
    detail::require_recorded(recorded_, where, "TransformerEncoder");
    Tensor3<Scalar> d = blks_.empty() ? Tensor3<Scalar>(dY) : blks_.back().backward(dY);
    for (std::size_t i = blks_.size(); i-- > 1;) d = blks_[i - 1].backward(d);
    embedding_.backward(detail::scaled_by_sqrt_width(pos_encoding_.backward(d)));
  }

 private:
  friend class detail::WithParameters<TransformerEncoder<Scalar>, Scalar>;
  static constexpr const char* module_name = "TransformerEncoder";

  void check(const Matrix<Index>& tokens, const Mask& valid_lens, const char* where) const {
    embedding_.check_tokens(tokens, where);
    detail::require(tokens.cols() <= pos_encoding_.max_len(), where, ": tokens has ", tokens.cols(),
                    " steps, more than max_len (", pos_encoding_.max_len(), ")");
    valid_lens.require_shape(tokens.rows(), tokens.cols(), tokens.cols(), where);
  }

  template <class Self, class Visit>
  static void visit_with_gradients_of(Self& self, Visit& visit) {
    self.embedding_.visit_with_gradients(detail::prefixed("embedding.", visit));
    for (std::size_t i = 0; i < self.blks_.size(); ++i)
      self.blks_[i].visit_with_gradients(detail::prefixed("blks.block" + std::to_string(i) + ".", visit));
  }

  bool training_ = true;
  Embedding<Scalar> embedding_;
  PositionalEncoding<Scalar> pos_encoding_;
  std::vector<TransformerEncoderBlock<Scalar>> blks_;
  bool recorded_ = false;
};

}  // namespace ATTEND_ABI
}  // namespace attend
