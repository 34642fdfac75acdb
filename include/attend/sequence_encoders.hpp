// attend/sequence_encoders.hpp — three ways to encode a sequence, behind one interface, to compare them as the
// chapter's table does:
//
//                         computational cost    sequential operations    maximum path length
//   CNN (kernel k)        O(k n d^2)            O(1)                     O(n / k)
//   RNN                   O(n d^2)              O(n)                     O(n)
//   self-attention        O(n^2 d)              O(1)                     O(1)
//
// Each maps X (batch, n, d) to (batch, n, d) through num_layers layers of width d. They are evaluation-only: no
// dropout anywhere, so there is no training mode. Each is built from attend's modules, with parameters drawn from
// the generator given last, layer after layer (the same seed gives the same encoder):
//
//   SelfAttentionEncoder(d, num_heads, num_layers)   H = X + P[:n] (positional encoding, once), then per layer
//                                                    H <- MultiHeadAttention(d, d, d, d, num_heads, 0)(H, H, H)
//   RNNEncoder(d, num_layers)                        per layer H <- RNN(d, d)(H): every h_t, tanh
//   CNNEncoder(d, kernel_size, num_layers)           per layer H <- Conv1d(d, d, kernel_size)(H), padding 'same',
//                                                    then tanh between layers (after each but the last)
//
// The common interface:
//   Tensor3 operator()(const Tensor3& X)           (batch, n, d) -> (batch, n, d)
//   double flops(Index batch, Index n) const        the exact GEMM work of one forward, 2 flops per multiply-add
//   Index sequential_operations(Index n) const      the length of the dependency chain, in stages (below)
//   Index max_path_length_formula(Index n) const    the path length from x_1 to y_n, or `unreachable`
//   Tensor3 embed(const Tensor3& X)                 what comes before the chain (the positional encoding, or a copy)
//   void stage(Index s, Tensor3& H)                 stage s of the chain, in place on H (batch, n, d)
// embed followed by every stage in order is the forward pass; measured_path_length (complexity.hpp) runs them
// one by one to measure the path length the formula states.
//
// Stages, and so sequential operations, are the steps of the forward that must run one after another because each
// needs the result of the one before; all the work inside one stage is independent across positions (and batch
// rows) and could run in parallel. A self-attention or CNN layer is one stage: every output position reads only
// the layer's input. An RNN time step is one stage: h_t needs h_{t-1}. So self-attention and the CNN have
// num_layers stages, the RNN num_layers * n (run layer after layer, as here; a wavefront schedule, step t of layer
// l beside step t + 1 of layer l - 1, would shorten the chain to n + num_layers - 1, still O(n)).
//
// Path length (defined in complexity.hpp): the fewest stages that carry information from one position to
// another on the way from x_1 to y_n.
//   self-attention  1 for n >= 2: one layer connects every pair.
//   RNN             n - 1: step t carries position t - 1 to t; more layers add no shortcut.
//   CNN             y_s reads x_{s - left} .. x_{s + right}, left = (k - 1) / 2 rounded down, right = k - 1 - left
//                   (PyTorch's 'same' padding puts the extra padding step of an even k on the right). Information from x_1 thus
//                   moves left = floor((k - 1) / 2) positions to the right per layer, and reaches y_n after
//                   ceil((n - 1) / left) layers: for odd k that is (k - 1) / 2 per layer, but for even k it is
//                   (k - 2) / 2, not k / 2 — the longer reach is towards the left. A kernel of 1 or 2 never moves
//                   anything right (unreachable), and a stack too shallow for the distance does not reach y_n either.
// For n = 1 every path length is 0.
#pragma once

#include <attend/config.hpp>

#include <algorithm>
#include <attend/complexity.hpp>
#include <attend/conv1d.hpp>
#include <attend/detail/views.hpp>
#include <attend/multi_head_attention.hpp>
#include <attend/positional_encoding.hpp>
#include <attend/random.hpp>
#include <attend/rnn.hpp>
#include <attend/tensor.hpp>
#include <cstddef>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

// Throws unless 0 <= layer < num_layers.
inline void require_layer(Index layer, Index num_layers, const char* where) {
  require(layer >= 0 && layer < num_layers, where, ": layer must be in [0, ", num_layers, "), got ", layer);
}

// Throws unless 0 <= s < stages, the number of stages for X's steps.
template <class Scalar>
void require_stage(Index s, Index stages, const Tensor3<Scalar>& H, const char* where) {
  require(s >= 0 && s < stages, where, ": stage must be in [0, ", stages, ") for H of shape ",
          shape_text(H.dimensions()), ", got ", s);
}

// Throws unless 0 <= first <= last <= size; `what` names the range.
inline void require_range(Index first, Index last, Index size, const char* where, const char* what) {
  require(first >= 0 && first <= last && last <= size, where, ": ", what, " [first, last) must lie in [0, ", size,
          "], got [", first, ", ", last, ")");
}

// Throws unless batch >= 0 and n >= 0: the sizes flops() and sequential_operations() count for.
inline void require_sizes(Index batch, Index n, const char* where) {
  require_at_least(batch, 0, where, "batch");
  require_at_least(n, 0, where, "n");
}

// Rows [first, last) of every batch row: (batch, last - first, d).
template <class Scalar>
Tensor3<Scalar> steps_of(const ConstTensorMap3<Scalar>& X, Index first, Index last) {
  const Eigen::array<Index, 3> offsets{0, first, 0};
  const Eigen::array<Index, 3> extents{X.dimension(0), last - first, X.dimension(2)};
  return X.slice(offsets, extents);
}

}  // namespace detail

// ---- self-attention ---------------------------------------------------------------------------------------------

template <class Scalar>
class SelfAttentionEncoder {
 public:
  // max_len: the longest sequence the positional encoding covers (1000 by default, as d2l's).
  SelfAttentionEncoder(Index num_hiddens, Index num_heads, Index num_layers, Generator& generator = default_generator())
      : SelfAttentionEncoder(num_hiddens, num_heads, num_layers, 1000, generator) {}
  SelfAttentionEncoder(Index num_hiddens, Index num_heads, Index num_layers, Index max_len,
                       Generator& generator = default_generator())
      : encoding_(checked(num_hiddens, num_heads, num_layers, max_len), Scalar(0), max_len, generator) {
    encoding_.eval();
    layers_.reserve(static_cast<std::size_t>(num_layers));
    for (Index l = 0; l < num_layers; ++l) {
      layers_.emplace_back(num_hiddens, num_hiddens, num_hiddens, num_hiddens, num_heads, Scalar(0), false, generator);
      layers_.back().eval();
    }
  }

  Index num_hiddens() const { return encoding_.num_hiddens(); }
  Index num_heads() const { return layers_.front().num_heads(); }
  Index num_layers() const { return static_cast<Index>(layers_.size()); }
  Index max_len() const { return encoding_.max_len(); }
  MultiHeadAttention<Scalar>& attention(Index layer) {  // layer's attention: W_q, W_k, W_v, W_o (d, d), no bias
    detail::require_layer(layer, num_layers(), "SelfAttentionEncoder");
    return layers_[static_cast<std::size_t>(layer)];
  }
  const PositionalEncoding<Scalar>& positional_encoding() const { return encoding_; }

  // X: (batch, n, d) -> (batch, n, d). Every tensor argument of an encoder is a Tensor3 or a map of one (TensorMap3,
  // ConstTensorMap3), read in place.
  template <class Input>
  Tensor3<Scalar> operator()(const Input& X) {
    Tensor3<Scalar> H = embed(X);  // (batch, n, d)
    for (auto& attention : layers_) H = attention(H, H, H);
    return H;
  }

  // X + P[:n]: (batch, n, d) -> (batch, n, d)
  template <class Input>
  Tensor3<Scalar> embed(const Input& input) {
    const ConstTensorMap3<Scalar> X = detail::input3<Scalar>(input);
    require_input(X, "X");
    return encoding_(X);
  }

  // Layer `layer` alone: H (batch, n, d) -> (batch, n, d).
  template <class Input>
  Tensor3<Scalar> layer(Index layer, const Input& input) {
    const ConstTensorMap3<Scalar> H = detail::input3<Scalar>(input);
    return this->layer(layer, H, 0, H.dimension(1));
  }

  // Output positions [first, last) of layer `layer`: H (batch, n, d) -> (batch, last - first, d). They need H's
  // positions [first, last) as queries and all of H as keys and values, nothing else: any split of the positions
  // can be computed independently (on separate copies of the encoder: a call records the attention weights).
  template <class Input>
  Tensor3<Scalar> layer(Index layer, const Input& input, Index first, Index last) {
    constexpr const char* where = "SelfAttentionEncoder";
    const ConstTensorMap3<Scalar> H = detail::input3<Scalar>(input);
    detail::require_layer(layer, num_layers(), where);
    require_input(H, "H");
    detail::require_range(first, last, H.dimension(1), where, "positions");
    auto& attention = layers_[static_cast<std::size_t>(layer)];
    if (first == 0 && last == H.dimension(1)) return attention(H, H, H);
    const Tensor3<Scalar> queries = detail::steps_of<Scalar>(H, first, last);  // (batch, last - first, d)
    return attention(queries, H, H);
  }

  // Stage s is layer s: H (batch, n, d) <- layer(s, H).
  void stage(Index s, Tensor3<Scalar>& H) {
    detail::require_stage(s, sequential_operations(H.dimension(1)), H, "SelfAttentionEncoder");
    H = layer(s, H);
  }

  // Per layer, with h heads of width d / h:
  //   projections   W_q, W_k, W_v, W_o: 4 GEMMs (batch n, d) x (d, d)           4 * 2 batch n d^2
  //   scores        batch h GEMMs (n, d/h) x (d/h, n)                           2 batch n^2 d
  //   weights @ V   batch h GEMMs (n, n) x (n, d/h)                             2 batch n^2 d
  // = num_layers * (8 batch n d^2 + 4 batch n^2 d). Not counted: the positional encoding (batch n d additions),
  // the 1/sqrt(d/h) scaling and the softmax (a few operations and one exp per score, O(batch h n^2)).
  double flops(Index batch, Index n) const {
    detail::require_sizes(batch, n, "SelfAttentionEncoder::flops");
    const double b = static_cast<double>(batch), m = static_cast<double>(n), d = static_cast<double>(num_hiddens());
    return static_cast<double>(num_layers()) * (8 * b * m * d * d + 4 * b * m * m * d);
  }

  // One stage per layer, whatever n: O(1) in n.
  Index sequential_operations(Index n) const {
    detail::require_sizes(0, n, "SelfAttentionEncoder::sequential_operations");
    return num_layers();
  }

  // 1 for n >= 2 (one layer connects every pair), 0 for n = 1.
  Index max_path_length_formula(Index n) const {
    detail::require_at_least(n, 1, "SelfAttentionEncoder", "n");
    return n >= 2 ? 1 : 0;
  }

 private:
  // Checks the configuration before any member is built; returns num_hiddens.
  static Index checked(Index num_hiddens, Index num_heads, Index num_layers, Index max_len) {
    constexpr const char* where = "SelfAttentionEncoder";
    detail::require_at_least(num_hiddens, 1, where, "num_hiddens");
    detail::require_at_least(num_heads, 1, where, "num_heads");
    detail::require_at_least(num_layers, 1, where, "num_layers");
    detail::require_at_least(max_len, 1, where, "max_len");
    detail::require(num_hiddens % num_heads == 0, where, ": num_hiddens (", num_hiddens,
                    ") must be divisible by num_heads (", num_heads, ")");
    return num_hiddens;
  }

  void require_input(const ConstTensorMap3<Scalar>& X, const char* name) const {
    constexpr const char* where = "SelfAttentionEncoder";
    detail::require_dim(X, 2, num_hiddens(), where, name, "features (num_hiddens)");
    detail::require(X.dimension(1) <= max_len(), where, ": ", name, " has ", X.dimension(1),
                    " steps, more than max_len (", max_len(), "), shape ", detail::shape_text(X.dimensions()));
  }

  PositionalEncoding<Scalar> encoding_;            // P: (max_len, d)
  std::vector<MultiHeadAttention<Scalar>> layers_;  // num_layers, each (d -> d)
};

// ---- RNN --------------------------------------------------------------------------------------------------------

template <class Scalar>
class RNNEncoder {
 public:
  RNNEncoder(Index num_hiddens, Index num_layers, Generator& generator = default_generator()) {
    detail::require_at_least(num_hiddens, 1, "RNNEncoder", "num_hiddens");
    detail::require_at_least(num_layers, 1, "RNNEncoder", "num_layers");
    layers_.reserve(static_cast<std::size_t>(num_layers));
    for (Index l = 0; l < num_layers; ++l) layers_.emplace_back(num_hiddens, num_hiddens, generator);
  }

  Index num_hiddens() const { return layers_.front().hidden_size(); }
  Index num_layers() const { return static_cast<Index>(layers_.size()); }
  RNN<Scalar>& rnn(Index layer) {
    detail::require_layer(layer, num_layers(), "RNNEncoder");
    return layers_[static_cast<std::size_t>(layer)];
  }
  const RNN<Scalar>& rnn(Index layer) const {
    detail::require_layer(layer, num_layers(), "RNNEncoder");
    return layers_[static_cast<std::size_t>(layer)];
  }

  // X: (batch, n, d) -> (batch, n, d): the last layer's h_1 .. h_n
  template <class Input>
  Tensor3<Scalar> operator()(const Input& input) const {
    const ConstTensorMap3<Scalar> X = detail::input3<Scalar>(input);
    require_input(X, "X");
    Tensor3<Scalar> H = X;  // (batch, n, d)
    for (const auto& rnn : layers_) H = rnn.forward(H);
    return H;
  }

  // A copy of X (batch, n, d): nothing comes before the chain.
  template <class Input>
  Tensor3<Scalar> embed(const Input& input) const {
    const ConstTensorMap3<Scalar> X = detail::input3<Scalar>(input);
    require_input(X, "X");
    return X;
  }

  // Layer `layer` alone, all its steps: H (batch, n, d) -> (batch, n, d).
  template <class Input>
  Tensor3<Scalar> layer(Index layer, const Input& input) const {
    const ConstTensorMap3<Scalar> H = detail::input3<Scalar>(input);
    require_input(H, "H");
    return rnn(layer).forward(H);
  }

  // One time step of one layer, for hidden units [unit_first, unit_last) only:
  //   H[:, t, units] = tanh(X[:, t, :] W_ih[units]^T + b_ih[units] + b_hh[units] + H[:, t - 1, :] W_hh[units]^T)
  // (no H term at t = 0: h_0 = 0), the recurrence of RNN(d, d) written out for one step. X: the layer's input
  // (batch, n, d); H: its output (batch, n, d), holding h_{t-1} in all units. X and H may be the same tensor (each
  // position t then holds x_t until its step overwrites it with h_t), provided one call covers all units; calls on
  // disjoint unit ranges of separate X and H can run at once. The result agrees with the layer's forward to rounding
  // (the layer projects all steps in one product, whose sums may be blocked differently).
  template <class Input, class Output>
  void step(Index layer, Index t, const Input& input, Output&& output, Index unit_first, Index unit_last) const {
    constexpr const char* where = "RNNEncoder";
    const ConstTensorMap3<Scalar> X = detail::input3<Scalar>(input);
    const TensorMap3<Scalar> H = detail::output3<Scalar>(output);
    const RNN<Scalar>& cell = rnn(layer);
    cell.require_parameters(where);
    require_input(X, "X");
    require_input(detail::input3<Scalar>(H), "H");
    detail::require_same_dim(X, H, 0, where, "X", "H", "batch size");
    detail::require_same_dim(X, H, 1, where, "X", "H", "number of steps");
    detail::require(t >= 0 && t < X.dimension(1), where, ": t must be in [0, ", X.dimension(1), "), got ", t);
    detail::require_range(unit_first, unit_last, num_hiddens(), where, "hidden units");
    const Index batch = X.dimension(0), n = X.dimension(1), d = num_hiddens(), units = unit_last - unit_first;
    using StepView = Eigen::Map<const Matrix<Scalar>, 0, Eigen::OuterStride<>>;
    const StepView x_t(X.data() + t * d, batch, d, Eigen::OuterStride<>(n * d));  // (batch, d)
    Matrix<Scalar> pre(batch, units);                                              // (batch, units)
    pre.noalias() = x_t * cell.weight_ih().middleRows(unit_first, units).transpose();
    pre.rowwise() += (cell.bias_ih() + cell.bias_hh()).segment(unit_first, units).transpose();
    if (t > 0) {
      const StepView h_prev(H.data() + (t - 1) * d, batch, d, Eigen::OuterStride<>(n * d));  // (batch, d)
      pre.noalias() += h_prev * cell.weight_hh().middleRows(unit_first, units).transpose();
    }
    Eigen::Map<Matrix<Scalar>, 0, Eigen::OuterStride<>> h_t(H.data() + t * d + unit_first, batch, units,
                                                            Eigen::OuterStride<>(n * d));  // (batch, units)
    h_t = pre.array().tanh().matrix();
  }

  // Stage s is step t = s % n of layer l = s / n, in place on H (batch, n, d): positions < t hold layer l's h,
  // positions >= t its input; after the last step of layer l, H is layer l's output and layer l + 1's input.
  void stage(Index s, Tensor3<Scalar>& H) const {
    const Index n = H.dimension(1);
    detail::require_stage(s, sequential_operations(n), H, "RNNEncoder");
    step(s / n, s % n, H, H, 0, num_hiddens());
  }

  // Per layer, as RNN does it: the input projection, one GEMM (batch n, d) x (d, d), 2 batch n d^2; the recurrence,
  // a GEMM (batch, d) x (d, d) at every step but the first (h_0 = 0), 2 batch (n - 1) d^2
  // = num_layers * 2 batch (2n - 1) d^2. Not counted: bias additions and tanh (O(batch n d)).
  double flops(Index batch, Index n) const {
    detail::require_sizes(batch, n, "RNNEncoder::flops");
    const double b = static_cast<double>(batch), m = static_cast<double>(n), d = static_cast<double>(num_hiddens());
    const double recurrent_steps = n > 0 ? m - 1 : 0;
    return static_cast<double>(num_layers()) * 2 * b * (m + recurrent_steps) * d * d;
  }

  // One stage per time step of every layer: num_layers * n, O(n).
  Index sequential_operations(Index n) const {
    detail::require_sizes(0, n, "RNNEncoder::sequential_operations");
    return num_layers() * n;
  }

  // n - 1: x_1 reaches y_n through the steps 2 .. n of the first layer.
  Index max_path_length_formula(Index n) const {
    detail::require_at_least(n, 1, "RNNEncoder", "n");
    return n - 1;
  }

 private:
  void require_input(const ConstTensorMap3<Scalar>& X, const char* name) const {
    detail::require_dim(X, 2, num_hiddens(), "RNNEncoder", name, "features (num_hiddens)");
  }

  std::vector<RNN<Scalar>> layers_;  // num_layers, each RNN(d, d)
};

// ---- CNN --------------------------------------------------------------------------------------------------------

template <class Scalar>
class CNNEncoder {
 public:
  CNNEncoder(Index num_hiddens, Index kernel_size, Index num_layers, Generator& generator = default_generator()) {
    detail::require_at_least(num_hiddens, 1, "CNNEncoder", "num_hiddens");
    detail::require_at_least(kernel_size, 1, "CNNEncoder", "kernel_size");
    detail::require_at_least(num_layers, 1, "CNNEncoder", "num_layers");
    layers_.reserve(static_cast<std::size_t>(num_layers));
    for (Index l = 0; l < num_layers; ++l) layers_.emplace_back(num_hiddens, num_hiddens, kernel_size, true, generator);
  }

  Index num_hiddens() const { return layers_.front().out_channels(); }
  Index kernel_size() const { return layers_.front().kernel_size(); }
  Index num_layers() const { return static_cast<Index>(layers_.size()); }
  Conv1d<Scalar>& conv(Index layer) {
    detail::require_layer(layer, num_layers(), "CNNEncoder");
    return layers_[static_cast<std::size_t>(layer)];
  }
  const Conv1d<Scalar>& conv(Index layer) const {
    detail::require_layer(layer, num_layers(), "CNNEncoder");
    return layers_[static_cast<std::size_t>(layer)];
  }

  // X: (batch, n, d) -> (batch, n, d)
  template <class Input>
  Tensor3<Scalar> operator()(const Input& input) const {
    const ConstTensorMap3<Scalar> X = detail::input3<Scalar>(input);
    require_input(X, "X");
    Tensor3<Scalar> H = X;  // (batch, n, d)
    for (Index l = 0; l < num_layers(); ++l) H = layer(l, H);
    return H;
  }

  // A copy of X (batch, n, d): nothing comes before the chain.
  template <class Input>
  Tensor3<Scalar> embed(const Input& input) const {
    const ConstTensorMap3<Scalar> X = detail::input3<Scalar>(input);
    require_input(X, "X");
    return X;
  }

  // Layer `layer` alone, the convolution then (except after the last layer) tanh: H (batch, n, d) -> (batch, n, d).
  template <class Input>
  Tensor3<Scalar> layer(Index layer, const Input& input) const {
    const ConstTensorMap3<Scalar> H = detail::input3<Scalar>(input);
    return this->layer(layer, H, 0, H.dimension(1));
  }

  // Output positions [first, last) of layer `layer`: H (batch, n, d) -> (batch, last - first, d). They need only
  // H's positions [first - left, last + right) (clipped to the sequence, where the zero padding is real): any split
  // of the positions can be computed independently.
  template <class Input>
  Tensor3<Scalar> layer(Index layer, const Input& input, Index first, Index last) const {
    constexpr const char* where = "CNNEncoder";
    const ConstTensorMap3<Scalar> H = detail::input3<Scalar>(input);
    const Conv1d<Scalar>& conv = this->conv(layer);
    require_input(H, "H");
    const Index n = H.dimension(1);
    detail::require_range(first, last, n, where, "positions");
    Tensor3<Scalar> Y;  // (batch, last - first, d)
    if (first == 0 && last == n) {
      Y = conv.forward(H);
    } else {
      const Index begin = std::max<Index>(0, first - conv.left_padding());
      const Index end = std::min(n, last + conv.right_padding());
      const Tensor3<Scalar> window = conv.forward(detail::steps_of<Scalar>(H, begin, end));  // (batch, end - begin, d)
      Y = detail::steps_of<Scalar>(detail::input3<Scalar>(window), first - begin, last - begin);
    }
    if (layer + 1 < num_layers()) Y = Y.tanh();
    return Y;
  }

  // Stage s is layer s: H (batch, n, d) <- layer(s, H).
  void stage(Index s, Tensor3<Scalar>& H) const {
    detail::require_stage(s, sequential_operations(H.dimension(1)), H, "CNNEncoder");
    H = layer(s, H);
  }

  // Per layer, as Conv1d does it: one GEMM (batch n, d k) x (d k, d) on the gathered windows, padding zeros included,
  // 2 batch n k d^2 = num_layers * 2 batch n k d^2. Not counted: bias additions and tanh (O(batch n d)), and the
  // gathering (copies).
  double flops(Index batch, Index n) const {
    detail::require_sizes(batch, n, "CNNEncoder::flops");
    const double b = static_cast<double>(batch), m = static_cast<double>(n), d = static_cast<double>(num_hiddens());
    return static_cast<double>(num_layers()) * 2 * b * m * static_cast<double>(kernel_size()) * d * d;
  }

  // One stage per layer, whatever n: O(1) in n.
  Index sequential_operations(Index n) const {
    detail::require_sizes(0, n, "CNNEncoder::sequential_operations");
    return num_layers();
  }

  // Layers for x_1 to reach y_n: ceil((n - 1) / left) with left = floor((k - 1) / 2), or `unreachable` when left is
  // 0 (k = 1 or 2) or the encoder has fewer layers; 0 for n = 1.
  Index max_path_length_formula(Index n) const {
    detail::require_at_least(n, 1, "CNNEncoder", "n");
    if (n == 1) return 0;
    const Index left = (kernel_size() - 1) / 2;
    if (left == 0) return unreachable;
    const Index layers = (n - 1 + left - 1) / left;
    return layers <= num_layers() ? layers : unreachable;
  }

 private:
  void require_input(const ConstTensorMap3<Scalar>& X, const char* name) const {
    detail::require_dim(X, 2, num_hiddens(), "CNNEncoder", name, "features (num_hiddens)");
  }

  std::vector<Conv1d<Scalar>> layers_;  // num_layers, each Conv1d(d, d, kernel_size)
};

}  // namespace ATTEND_ABI
}  // namespace attend
