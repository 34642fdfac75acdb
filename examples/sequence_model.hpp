// examples/sequence_model.hpp — the model examples/train_attention.cpp trains, and tests/test_attention_gradients.cpp
// trains again beside PyTorch: tokens in, one distribution over the vocabulary per position out.
//
//   X = one_hot(tokens) E^T * sqrt(d)          E: (d, vocab), a Linear without bias (d2l's embedding scale)
//   X = PositionalEncoding(X)                  sinusoids added, then dropout
//   Y = MultiHeadAttention(X, X, X)            self-attention, biases on
//   logits = Y W^T + b                         (batch, steps, vocab)
//
// backward(dL/dlogits) runs the four layers backwards and adds every parameter's gradient; parameters() lists
// them for an optimizer: embedding.weight, the attention's W_q.weight, W_q.bias, ... W_o.bias, head.weight,
// head.bias.
#pragma once

#include <attend/attend.hpp>
#include <cmath>
#include <vector>

namespace attend_examples {

template <class Scalar>
struct SequenceModel {
  SequenceModel(attend::Index vocab, attend::Index d, attend::Index heads, Scalar dropout, attend::Generator& generator)
      : embedding(vocab, d, false, generator),
        position(d, dropout, 1000, generator),
        attention(d, d, d, d, heads, dropout, true, generator),
        head(d, vocab, true, generator),
        scale(std::sqrt(static_cast<Scalar>(d))) {}

  // one_hot: (batch, steps, vocab) -> logits (batch, steps, vocab); records every layer's call.
  attend::Tensor3<Scalar> operator()(const attend::Tensor3<Scalar>& one_hot) {
    const attend::Tensor3<Scalar> embedded = embedding(one_hot) * scale;  // (batch, steps, d)
    const attend::Tensor3<Scalar> X = position(embedded);                 // (batch, steps, d)
    return head(attention(X, X, X));
  }

  // grad_logits: (batch, steps, vocab), the gradient of the last call's logits; adds every parameter's gradient.
  void backward(const attend::Tensor3<Scalar>& grad_logits) {
    const attend::AttentionGradients<Scalar> g = attention.backward(head.backward(grad_logits));
    const attend::Tensor3<Scalar> dX = g.queries + g.keys + g.values;          // X was all three: (batch, steps, d)
    const attend::Tensor3<Scalar> d_embedded = position.backward(dX) * scale;  // (batch, steps, d)
    embedding.backward(d_embedded);
  }

  std::vector<attend::Parameter<Scalar>> parameters() {
    std::vector<attend::Parameter<Scalar>> all;
    for (auto list : {embedding.parameters(), attention.parameters(), head.parameters()})
      all.insert(all.end(), list.begin(), list.end());
    return all;
  }

  void train(bool on = true) {
    position.train(on);
    attention.train(on);
  }

  attend::Linear<Scalar> embedding;  // (d, vocab)
  attend::PositionalEncoding<Scalar> position;
  attend::MultiHeadAttention<Scalar> attention;
  attend::Linear<Scalar> head;  // (vocab, d)
  Scalar scale;                 // sqrt(d)
};

// tokens: (batch, steps), each in [0, vocab) -> (batch, steps, vocab) one-hot rows.
template <class Scalar>
attend::Tensor3<Scalar> one_hot(const attend::Matrix<attend::Index>& tokens, attend::Index vocab) {
  attend::Tensor3<Scalar> X(tokens.rows(), tokens.cols(), vocab);  // (batch, steps, vocab)
  X.setZero();
  for (attend::Index b = 0; b < tokens.rows(); ++b)
    for (attend::Index t = 0; t < tokens.cols(); ++t) X(b, t, tokens(b, t)) = Scalar(1);
  return X;
}

}  // namespace attend_examples
