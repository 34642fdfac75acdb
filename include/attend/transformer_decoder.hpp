// attend/transformer_decoder.hpp — d2l's Transformer decoder: blocks of masked self-attention, encoder-decoder
// attention and the feed-forward network, each with its AddNorm; then a dense layer to the vocabulary.
//
//   X = pos_encoding(embedding(tokens) * sqrt(num_hiddens))       tokens (batch, steps)
//   in each block:  Y = addnorm1(X, attention1(X))                 self-attention, causal
//                   Z = addnorm2(Y, attention2(Y, enc, enc, enc_valid_lens))
//                   X = addnorm3(Z, ffn(Z))
//   logits = dense(X)                                              (batch, steps, vocab_size)
//
// Training mode: the given steps attend causally to each other (d2l's dec_valid_lens = 1 .. steps), from position 0.
// Evaluation mode: the steps are appended to the state's caches (one KVCache per block, holding attention1's
// projected keys and values), take the positions that follow what the caches hold, and each sees what was cached
// before the call and the steps before it in the call; so decoding token by token gives the logits of one
// whole-sequence call. d2l caches the blocks' inputs and re-projects them at each step: the same numbers. d2l's own
// prediction loop encodes each one-token input at position 0 (it adds P[0] at every step); attend uses the step's
// position (docs/TRANSFORMERS.md shows the difference).
//
// attention1 is a GroupedQueryAttention with one key/value head per query head (plain multi-head attention, the
// form with a cache); attention2 a MultiHeadAttention; neither has a bias (d2l's). state_dict(): embedding.weight,
// blks.block0.attention1.W_q.weight, ..., blks.block0.addnorm3.ln.bias, ..., dense.weight, dense.bias.
#pragma once

#include <attend/config.hpp>

#include <attend/add_norm.hpp>
#include <attend/detail/modules/transformer_sizes.hpp>
#include <attend/detail/views.hpp>
#include <attend/embedding.hpp>
#include <attend/grouped_query_attention.hpp>
#include <attend/kv_cache.hpp>
#include <attend/linear.hpp>
#include <attend/mask.hpp>
#include <attend/multi_head_attention.hpp>
#include <attend/parameter.hpp>
#include <attend/position_wise_ffn.hpp>
#include <attend/positional_encoding.hpp>
#include <attend/random.hpp>
#include <attend/tensor.hpp>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {

// What the decoder reads besides its tokens: the encoder's outputs and their valid lengths, and in evaluation mode
// each block's key/value cache. Made by TransformerDecoder::init_state.
template <class Scalar>
struct DecoderState {
  Tensor3<Scalar> enc_outputs;          // (batch, enc_steps, num_hiddens)
  Mask enc_valid_lens;                  // the encoder's padding, for attention2
  std::vector<KVCache<Scalar>> caches;  // one per block: attention1's keys and values so far (evaluation mode)
  // dL/d enc_outputs of the last training call made with this state, written by TransformerDecoder::backward().
  std::shared_ptr<Tensor3<Scalar>> enc_outputs_grad = std::make_shared<Tensor3<Scalar>>();

  Index steps() const { return caches.empty() ? 0 : caches.front().size(); }  // steps decoded so far
};

// The gradients of one decoder block's call: its input's and the encoder outputs'.
template <class Scalar>
struct DecoderBlockGradients {
  Tensor3<Scalar> X, enc_outputs;
};

template <class Scalar>
class TransformerDecoderBlock : public detail::WithParameters<TransformerDecoderBlock<Scalar>, Scalar> {
 public:
  // Parameters drawn attention1, attention2, ffn (d2l's order).
  TransformerDecoderBlock(Index num_hiddens, Index ffn_num_hiddens, Index num_heads, Scalar dropout,
                          Generator& generator = default_generator())
      : attention1_(num_hiddens, num_heads, num_heads, 0, false, dropout, generator),
        addnorm1_(num_hiddens, dropout, Scalar(1e-5), generator),
        attention2_(num_hiddens, num_hiddens, num_hiddens, num_hiddens, num_heads, dropout, false, generator),
        addnorm2_(num_hiddens, dropout, Scalar(1e-5), generator),
        ffn_(num_hiddens, ffn_num_hiddens, num_hiddens, Activation::relu, generator),
        addnorm3_(num_hiddens, dropout, Scalar(1e-5), generator) {}

  GroupedQueryAttention<Scalar>& attention1() { return attention1_; }
  AddNorm<Scalar>& addnorm1() { return addnorm1_; }
  MultiHeadAttention<Scalar>& attention2() { return attention2_; }
  AddNorm<Scalar>& addnorm2() { return addnorm2_; }
  PositionWiseFFN<Scalar>& ffn() { return ffn_; }
  AddNorm<Scalar>& addnorm3() { return addnorm3_; }
  Index num_hiddens() const { return attention1_.num_hiddens(); }
  Index num_heads() const { return attention1_.num_heads(); }
  void keep_attention_weights(bool keep) { keep_weights_ = keep; }

  void train(bool training = true) {
    attention1_.train(training);
    addnorm1_.train(training);
    attention2_.train(training);
    addnorm2_.train(training);
    ffn_.train(training);
    addnorm3_.train(training);
  }

  // Training: X (batch, steps, num_hiddens), causal among its steps -> the same shape; records in every part.
  Tensor3<Scalar> operator()(const Tensor3<Scalar>& X, const Tensor3<Scalar>& enc, const Mask& enc_valid_lens) {
    const Tensor3<Scalar> Y = addnorm1_(X, attention1_(X, Mask::causal()));            // (batch, steps, num_hiddens)
    const Tensor3<Scalar> Z = addnorm2_(Y, attention2_(Y, enc, enc, enc_valid_lens));  // (batch, steps, num_hiddens)
    return addnorm3_(Z, ffn_(Z));
  }

  // Evaluation: the same arithmetic with X's steps appended to cache; records nothing in the block's parts, unless
  // keep_attention_weights(true) asked attention2 to keep its weights (attention2().attention_weights(): (batch *
  // num_heads, steps, enc_steps), d2l's encoder-decoder attention weights; set attention2's path to direct).
  Tensor3<Scalar> decode(const Tensor3<Scalar>& X, const Tensor3<Scalar>& enc, const Mask& enc_valid_lens,
                         KVCache<Scalar>& cache) {
    const Tensor3<Scalar> Y = addnorm1_.forward(X, attention1_(X, cache, Mask::causal()));
    const Tensor3<Scalar> Z = addnorm2_.forward(
        Y, keep_weights_ ? attention2_(Y, enc, enc, enc_valid_lens) : attention2_.forward(Y, enc, enc, enc_valid_lens));
    return addnorm3_.forward(Z, ffn_.forward(Z));
  }

  // dout, the gradient of the last operator() call's output -> its input's and the encoder outputs' gradients.
  DecoderBlockGradients<Scalar> backward(const Tensor3<Scalar>& dout) {
    const AddNormGradients<Scalar> g3 = addnorm3_.backward(dout);
    Tensor3<Scalar> dZ = ffn_.backward(g3.Y);  // (batch, steps, num_hiddens), plus the residual's
    detail::as_matrix(dZ) += detail::as_matrix(g3.X);
    const AddNormGradients<Scalar> g2 = addnorm2_.backward(dZ);
    AttentionGradients<Scalar> cross = attention2_.backward(g2.Y);
    Tensor3<Scalar> dY = g2.X;  // (batch, steps, num_hiddens)
    detail::as_matrix(dY) += detail::as_matrix(cross.queries);
    detail::as_matrix(cross.keys) += detail::as_matrix(cross.values);
    const AddNormGradients<Scalar> g1 = addnorm1_.backward(dY);
    Tensor3<Scalar> dX = attention1_.backward(g1.Y);  // (batch, steps, num_hiddens)
    detail::as_matrix(dX) += detail::as_matrix(g1.X);
    return {std::move(dX), std::move(cross.keys)};
  }

 private:
  friend class detail::WithParameters<TransformerDecoderBlock<Scalar>, Scalar>;
  static constexpr const char* module_name = "TransformerDecoderBlock";

  template <class Self, class Visit>
  static void visit_with_gradients_of(Self& self, Visit& visit) {
    self.attention1_.visit_with_gradients(detail::prefixed("attention1.", visit));
    self.addnorm1_.visit_with_gradients(detail::prefixed("addnorm1.", visit));
    self.attention2_.visit_with_gradients(detail::prefixed("attention2.", visit));
    self.addnorm2_.visit_with_gradients(detail::prefixed("addnorm2.", visit));
    self.ffn_.visit_with_gradients(detail::prefixed("ffn.", visit));
    self.addnorm3_.visit_with_gradients(detail::prefixed("addnorm3.", visit));
  }

  GroupedQueryAttention<Scalar> attention1_;
  AddNorm<Scalar> addnorm1_;
  MultiHeadAttention<Scalar> attention2_;
  AddNorm<Scalar> addnorm2_;
  PositionWiseFFN<Scalar> ffn_;
  AddNorm<Scalar> addnorm3_;
  bool keep_weights_ = false;  // decode() keeps attention2's weights
};

template <class Scalar>
class TransformerDecoder : public detail::WithParameters<TransformerDecoder<Scalar>, Scalar> {
 public:
  // Parameters drawn embedding, each block in order, dense. max_len: the longest sequence the positions cover.
  TransformerDecoder(Index vocab_size, Index num_hiddens, Index ffn_num_hiddens, Index num_heads, Index num_blks,
                     Scalar dropout, Index max_len = 1000, Generator& generator = default_generator())
      : embedding_(vocab_size,
                   detail::checked_transformer_sizes("TransformerDecoder", num_hiddens, ffn_num_hiddens, num_heads,
                                                     num_blks, dropout, max_len),
                   generator),
        pos_encoding_(num_hiddens, dropout, max_len, generator),
        blks_(make_blocks(num_hiddens, ffn_num_hiddens, num_heads, num_blks, dropout, generator)),
        dense_(num_hiddens, vocab_size, true, generator) {}

  Embedding<Scalar>& embedding() { return embedding_; }
  PositionalEncoding<Scalar>& pos_encoding() { return pos_encoding_; }
  TransformerDecoderBlock<Scalar>& block(Index i) { return blks_.at(static_cast<std::size_t>(i)); }
  Linear<Scalar>& dense() { return dense_; }
  Index num_blks() const { return static_cast<Index>(blks_.size()); }
  Index num_hiddens() const { return embedding_.embedding_dim(); }
  Index vocab_size() const { return dense_.out_features(); }

  void train(bool training = true) {
    training_ = training;
    embedding_.train(training);
    pos_encoding_.train(training);
    for (auto& blk : blks_) blk.train(training);
    dense_.train(training);
  }
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // enc_outputs (batch, enc_steps, num_hiddens) and their valid lengths -> a state whose caches hold up to capacity
  // decoded steps per batch row (evaluation mode), reserved here.
  DecoderState<Scalar> init_state(const Tensor3<Scalar>& enc_outputs, const Mask& enc_valid_lens = {},
                                  Index capacity = 1024) const {
    constexpr const char* where = "TransformerDecoder::init_state";
    detail::require_dim(enc_outputs, 2, num_hiddens(), where, "enc_outputs", "features (num_hiddens)");
    detail::require_at_least(capacity, 1, where, "capacity");
    enc_valid_lens.require_shape(enc_outputs.dimension(0), 1, enc_outputs.dimension(1), where);
    DecoderState<Scalar> state{enc_outputs, enc_valid_lens, {}};
    const Index heads = blks_.empty() ? 1 : blks_.front().num_heads();
    for (std::size_t i = 0; i < blks_.size(); ++i)
      state.caches.emplace_back(enc_outputs.dimension(0), heads, num_hiddens() / heads, capacity);
    return state;
  }

  // tokens (batch, steps) -> logits (batch, steps, vocab_size); see the top of this file for the two modes.
  Tensor3<Scalar> operator()(const Matrix<Index>& tokens, DecoderState<Scalar>& state) {
    const char* where = training_ ? "TransformerDecoder" : "TransformerDecoder (decoding)";
    const Index start = training_ ? 0 : state.steps();
    check(tokens, state, start, where);
    Tensor3<Scalar> X = detail::scaled_by_sqrt_width(training_ ? embedding_(tokens) : embedding_.forward(tokens));
    if (training_) {
      X = pos_encoding_(X);
      for (auto& blk : blks_) X = blk(X, state.enc_outputs, state.enc_valid_lens);
      recorded_state_ = state.enc_outputs_grad;
      recorded_enc_shape_ = state.enc_outputs.dimensions();
      recorded_ = true;
      return dense_(X);
    }
    for (Index b = 0; b < X.dimension(0); ++b)  // positions start .. start + steps - 1
      detail::slice(X, b) += pos_encoding_.P().middleRows(start, tokens.cols());
    for (std::size_t i = 0; i < blks_.size(); ++i)
      X = blks_[i].decode(X, state.enc_outputs, state.enc_valid_lens, state.caches[i]);
    return dense_.forward(X);
  }

  // dlogits (batch, steps, vocab_size), the gradient of the last training call's logits: adds every parameter's
  // gradient and writes dL/d enc_outputs into that call's state (state.enc_outputs_grad). Throws std::logic_error when
  // no training call was recorded or its state no longer exists.
  template <class GradOutput>
  void backward(const GradOutput& grad_output) {
    constexpr const char* where = "TransformerDecoder::backward";
    const ConstTensorMap3<Scalar> dlogits = detail::input3<Scalar>(grad_output);
    detail::require_recorded(recorded_, where, "TransformerDecoder");
    const std::shared_ptr<Tensor3<Scalar>> enc_grad = recorded_state_.lock();
    if (!enc_grad)
      throw std::logic_error(detail::message(where, ": the DecoderState of the recorded call no longer exists"));
    Tensor3<Scalar> dX = dense_.backward(dlogits);  // (batch, steps, num_hiddens)
    Tensor3<Scalar> d_enc(recorded_enc_shape_);     // (batch, enc_steps, num_hiddens)
    d_enc.setZero();
    for (std::size_t i = blks_.size(); i-- > 0;) {
      DecoderBlockGradients<Scalar> g = blks_[i].backward(dX);
      dX = std::move(g.X);
      detail::as_matrix(d_enc) += detail::as_matrix(g.enc_outputs);
    }
    embedding_.backward(detail::scaled_by_sqrt_width(pos_encoding_.backward(dX)));
    *enc_grad = std::move(d_enc);
  }

 private:
  friend class detail::WithParameters<TransformerDecoder<Scalar>, Scalar>;
  static constexpr const char* module_name = "TransformerDecoder";

  // Everything a call reads, before anything changes (a decoding call appends to every cache or to none).
  void check(const Matrix<Index>& tokens, const DecoderState<Scalar>& state, Index start, const char* where) const {
    embedding_.check_tokens(tokens, where);
    detail::require_dim(state.enc_outputs, 2, num_hiddens(), where, "state.enc_outputs", "features (num_hiddens)");
    detail::require(state.enc_outputs.dimension(0) == tokens.rows(), where, ": tokens has ", tokens.rows(),
                    " batch rows, state.enc_outputs ", state.enc_outputs.dimension(0));
    state.enc_valid_lens.require_shape(tokens.rows(), tokens.cols(), state.enc_outputs.dimension(1), where);
    detail::require(start + tokens.cols() <= pos_encoding_.max_len(), where, ": steps ", start, " .. ",
                    start + tokens.cols() - 1, " pass max_len (", pos_encoding_.max_len(), ")");
    if (training_) return;
    detail::require(state.caches.size() == blks_.size(), where, ": the state must hold ", blks_.size(),
                    " caches (one per block; make it with init_state), got ", state.caches.size());
    const Index heads = blks_.empty() ? 1 : blks_.front().num_heads();
    for (const KVCache<Scalar>& cache : state.caches) {
      detail::require(cache.size() == start, where, ": the state's caches hold different numbers of steps");
      detail::require(cache.num_kv_heads() == heads && cache.head_dim() == num_hiddens() / heads, where,
                      ": the state's caches must hold ", heads, " heads of ", num_hiddens() / heads, ", got ",
                      cache.num_kv_heads(), " of ", cache.head_dim(), " (a state of another decoder?)");
      cache.require_room(tokens.rows(), tokens.cols(), where);
    }
  }

  template <class Self, class Visit>
  static void visit_with_gradients_of(Self& self, Visit& visit) {
    self.embedding_.visit_with_gradients(detail::prefixed("embedding.", visit));
    for (std::size_t i = 0; i < self.blks_.size(); ++i)
      self.blks_[i].visit_with_gradients(detail::prefixed("blks.block" + std::to_string(i) + ".", visit));
    self.dense_.visit_with_gradients(detail::prefixed("dense.", visit));
  }

  static std::vector<TransformerDecoderBlock<Scalar>> make_blocks(Index num_hiddens, Index ffn_num_hiddens,
                                                                  Index num_heads, Index num_blks, Scalar dropout,
                                                                  Generator& generator) {
    std::vector<TransformerDecoderBlock<Scalar>> blks;
    blks.reserve(static_cast<std::size_t>(num_blks));
    for (Index i = 0; i < num_blks; ++i) blks.emplace_back(num_hiddens, ffn_num_hiddens, num_heads, dropout, generator);
    return blks;
  }

  bool training_ = true;
  Embedding<Scalar> embedding_;
  PositionalEncoding<Scalar> pos_encoding_;
  std::vector<TransformerDecoderBlock<Scalar>> blks_;
  Linear<Scalar> dense_;                           // (vocab_size, num_hiddens)
  std::weak_ptr<Tensor3<Scalar>> recorded_state_;  // where the last training call's encoder gradient goes
  typename Tensor3<Scalar>::Dimensions recorded_enc_shape_;
  bool recorded_ = false;
};

}  // namespace ATTEND_ABI
}  // namespace attend
