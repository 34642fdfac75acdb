// attend/grouped_query_attention.hpp — the attention layer of Llama, Mistral, Qwen and Gemma: grouped-query heads,
// rotary positions, score options, a key/value cache for decoding.
//
//   Q = X W_q^T (+ b_q)   (batch, n, num_heads * head_dim)
//   K = X W_k^T (+ b_k)   (batch, n, num_kv_heads * head_dim)
//   V = X W_v^T (+ b_v)   (batch, n, num_kv_heads * head_dim)
//   Q, K rotated (set_rotary), step t at position t (or cache.size() + t when decoding)
//   Y = scaled_dot_product_attention(Q, K, V, num_heads, num_kv_heads, mask, options) W_o^T (+ b_o)
//
// The weights have transformers' shapes and names: W_q is q_proj (num_heads * head_dim, num_hiddens), W_k k_proj and
// W_v v_proj (num_kv_heads * head_dim, num_hiddens), W_o o_proj (num_hiddens, num_heads * head_dim); state_dict()
// names them W_q.weight, W_q.bias, ... in that order. Each key/value head is read in place by its group of query heads
// (no repeat_kv copy), forward, backward and decoding alike.
//
// operator()(X, mask) runs whole sequences and, in training mode, drops attention weights with probability dropout; it
// keeps X and the projections for backward(dY), which adds the weights' gradients and returns dX. The cached call
// operator()(X, cache, mask) decodes: X's steps take positions cache.size(), ..., their keys and values (after the
// rotation) are appended to the cache, and they attend to everything it holds under the mask, aligned bottom-right;
// it records nothing, drops nothing, and from the second call of a shape on (its out-parameter overload) allocates
// nothing. forward(X, mask, workspace, out) is the evaluation-mode call of whole sequences with its scratch in the
// caller's Workspace, allocating nothing from the second call of a shape on. A call that throws leaves the module and
// the cache as they were.
//
// Of bfloat16 (evaluation only): each projection is a Linear<bfloat16>, the rotation and the attention run in float on
// the stored values, and each result (Q, K, V, the attention's output, Y) is rounded once; the cache holds bfloat16.
// operator() is forward(), and backward() does not compile.
#pragma once

#include <attend/config.hpp>
#include <attend/detail/core/attention.hpp>
#include <attend/detail/views.hpp>
#include <attend/kv_cache.hpp>
#include <attend/linear.hpp>
#include <attend/mask.hpp>
#include <attend/module.hpp>
#include <attend/parameter.hpp>
#include <attend/random.hpp>
#include <attend/rotary_embedding.hpp>
#include <attend/scaled_dot_product_attention.hpp>
#include <attend/score_options.hpp>
#include <attend/tensor.hpp>
#include <optional>
#include <utility>

namespace attend {
inline namespace ATTEND_ABI {

template <class Scalar>
class GroupedQueryAttention : public Module, public detail::WithParameters<GroupedQueryAttention<Scalar>, Scalar> {
  friend class detail::WithParameters<GroupedQueryAttention<Scalar>, Scalar>;

 public:
  // head_dim 0 means num_hiddens / num_heads.
  GroupedQueryAttention(Index num_hiddens, Index num_heads, Index num_kv_heads, Index head_dim = 0, bool bias = false,
                        Scalar dropout = Scalar(0), Generator& generator = default_generator())
      : num_heads_(checked_heads(num_hiddens, num_heads, num_kv_heads, head_dim)),
        num_kv_heads_(num_kv_heads),
        head_dim_(head_dim > 0 ? head_dim : num_hiddens / num_heads),
        dropout_(checked_dropout(dropout)),
        W_q_(num_hiddens, num_heads * head_dim_, bias, generator),
        W_k_(num_hiddens, num_kv_heads * head_dim_, bias, generator),
        W_v_(num_hiddens, num_kv_heads * head_dim_, bias, generator),
        W_o_(num_heads * head_dim_, num_hiddens, bias, generator),
        generator_(generator.next()) {}

  Linear<Scalar>& W_q() { return W_q_; }  // (num_heads * head_dim, num_hiddens)
  Linear<Scalar>& W_k() { return W_k_; }  // (num_kv_heads * head_dim, num_hiddens)
  Linear<Scalar>& W_v() { return W_v_; }  // (num_kv_heads * head_dim, num_hiddens)
  Linear<Scalar>& W_o() { return W_o_; }  // (num_hiddens, num_heads * head_dim)
  const Linear<Scalar>& W_q() const { return W_q_; }
  const Linear<Scalar>& W_k() const { return W_k_; }
  const Linear<Scalar>& W_v() const { return W_v_; }
  const Linear<Scalar>& W_o() const { return W_o_; }
  Index num_heads() const { return num_heads_; }
  Index num_kv_heads() const { return num_kv_heads_; }
  Index head_dim() const { return head_dim_; }
  Index num_hiddens() const { return W_o_.out_features(); }
  Scalar dropout() const { return dropout_; }
  Generator& generator() { return generator_; }

  // Queries and keys are rotated after the projections (their head_dim must be this layer's).
  void set_rotary(const RotaryEmbedding<Scalar>& rotary) {
    detail::require(rotary.head_dim() == head_dim_, "GroupedQueryAttention::set_rotary: rotary.head_dim() must be ",
                    head_dim_, " (the layer's head_dim), got ", rotary.head_dim());
    rotary_ = rotary;
  }
  void clear_rotary() { rotary_.reset(); }
  bool has_rotary() const { return rotary_.has_value(); }

  // Checked now where the layer alone decides (the ALiBi slopes, one per query head), and at each call against its
  // shape (the bias).
  void set_score_options(const ScoreOptions<Scalar>& options) {
    detail::AttentionShape shape{1, 0, 0, num_heads_, num_kv_heads_, head_dim_, head_dim_};
    ScoreOptions<Scalar> checked = options;
    checked.bias = Tensor3<Scalar>();  // its shape depends on the call
    detail::require_score_options(checked, shape, "GroupedQueryAttention::set_score_options");
    options_ = options;
  }
  const ScoreOptions<Scalar>& score_options() const { return options_; }

  // Self-attention over whole sequences: X (batch, n, num_hiddens) -> (batch, n, num_hiddens), positions 0 .. n-1.
  // Keeps what backward() needs.
  template <class Input>
  Tensor3<Scalar> operator()(const Input& input, const Mask& mask = Mask::causal()) {
    if constexpr (detail::is_reduced<Scalar>) return forward(input, mask);  // evaluation only: nothing to keep
    const auto X = detail::input3<Scalar>(input);
    check(X, mask, X.dimension(1), "GroupedQueryAttention");
    Record r;
    r.X = X;
    r.Q = project(W_q_, X);
    r.K = project(W_k_, X);
    r.V = project(W_v_, X);
    rotate(r.Q, r.K, 0, false);
    r.dropout = is_training() && dropout_ > Scalar(0)
                    ? detail::AttentionDropout(static_cast<double>(dropout_), generator_.next())
                    : detail::AttentionDropout();
    r.mask = mask;
    r.context.resize(X.dimension(0), X.dimension(1), num_heads_ * head_dim_);  // (batch, n, num_heads * head_dim)
    detail::attention_heads<Scalar>(heads(r.Q, num_heads_), heads(r.K, num_kv_heads_), heads(r.V, num_kv_heads_),
                                    r.mask, options_, r.dropout, &r.lse,
                                    detail::heads_of_map<Scalar>(r.context, num_heads_), workspace_.buffers);
    Tensor3<Scalar> Y = project(W_o_, r.context);  // (batch, n, num_hiddens)
    record_ = std::move(r);
    return Y;
  }

  // dY (batch, n, num_hiddens), the gradient at the last operator()'s output -> dX (batch, n, num_hiddens); adds the
  // weights' gradients. std::logic_error without a recorded call.
  Tensor3<Scalar> backward(const Tensor3<Scalar>& dY) {
    static_assert(!detail::is_reduced<Scalar>,
                  "attend: GroupedQueryAttention<bfloat16> runs in evaluation only; train in float");
    if constexpr (!detail::is_reduced<Scalar>) {  // the body of float and double only
      constexpr const char* where = "GroupedQueryAttention::backward";
      detail::require_recorded(record_.has_value(), where, "GroupedQueryAttention");
      const Record& r = *record_;
      const std::array<Index, 3> shape{r.X.dimension(0), r.X.dimension(1), num_hiddens()};
      detail::require(dY.dimensions() == shape, where, ": dY must have shape ", detail::shape_text(shape),
                      " (the last call's output), got ", detail::shape_text(dY.dimensions()));
      const Tensor3<Scalar> d_context = W_o_.backward_from(r.context, dY);  // (batch, n, num_heads * head_dim)
      Tensor3<Scalar> dQ(r.Q.dimensions()), dK(r.K.dimensions()), dV(r.V.dimensions());
      detail::attention_backward_heads<Scalar>(
          heads(r.Q, num_heads_), heads(r.K, num_kv_heads_), heads(r.V, num_kv_heads_),
          detail::heads_of_map<const Scalar>(r.context, num_heads_), r.lse.data(),
          detail::heads_of_map<const Scalar>(d_context, num_heads_), r.mask, options_, r.dropout,
          detail::heads_of_map<Scalar>(dQ, num_heads_), detail::heads_of_map<Scalar>(dK, num_kv_heads_),
          detail::heads_of_map<Scalar>(dV, num_kv_heads_), workspace_.buffers);
      rotate(dQ, dK, 0, true);  // the rotation's gradient is the inverse rotation
      Tensor3<Scalar> dX = W_q_.backward_from(r.X, dQ);
      dX += W_k_.backward_from(r.X, dK);
      dX += W_v_.backward_from(r.X, dV);
      return dX;
    } else {
      return {};  // not reached: the assertion stops the build
    }
  }

  // The scratch of a call: the projections and the attention's buffers, kept between the calls that are given it so
  // that a repeated shape allocates nothing. One per thread that calls the layer.
  struct Workspace {
    Tensor3<Scalar> Q, K, V;  // (batch, n, heads * head_dim), after the rotation
    Tensor3<Scalar> context;  // (batch, n, num_heads * head_dim): the attention's output, W_o's input
    detail::core::Buffers<Scalar> buffers;
  };

  // Evaluation-mode output of whole sequences, recording nothing.
  template <class Input>
  Tensor3<Scalar> forward(const Input& input, const Mask& mask = Mask::causal()) const {
    const auto X = detail::input3<Scalar>(input);
    Tensor3<Scalar> Y(X.dimension(0), X.dimension(1), num_hiddens());  // (batch, n, num_hiddens)
    forward(X, mask, Y);
    return Y;
  }
  // The same into out (batch, n, num_hiddens): a Tensor3 of that shape or a TensorMap3.
  template <class Input, class Out>
  void forward(const Input& input, const Mask& mask, Out&& out) const {
    Workspace workspace;
    forward(input, mask, workspace, std::forward<Out>(out));
  }
  // The same with its scratch in workspace: from the second call of a shape on, allocates nothing.
  template <class Input, class Out>
  void forward(const Input& input, const Mask& mask, Workspace& workspace, Out&& out) const {
    const auto X = detail::input3<Scalar>(input);
    auto Y = detail::output3<Scalar>(out);
    constexpr const char* where = "GroupedQueryAttention::forward";
    check(X, mask, X.dimension(1), where);
    require_output(Y, X, where);
    project_all(X, workspace);
    rotate(workspace.Q, workspace.K, 0, false);
    detail::attention_heads<Scalar>(heads(workspace.Q, num_heads_), heads(workspace.K, num_kv_heads_),
                                    heads(workspace.V, num_kv_heads_), mask, options_, detail::AttentionDropout(),
                                    nullptr, detail::heads_of_map<Scalar>(workspace.context, num_heads_),
                                    workspace.buffers);
    project_into(W_o_, workspace.context, Y);
  }

  // Decoding: X (batch, s, num_hiddens) at positions cache.size() .. cache.size() + s - 1 -> (batch, s, num_hiddens).
  // Appends X's keys and values to the cache. Records nothing; evaluation-mode arithmetic (no dropout).
  template <class Input>
  Tensor3<Scalar> operator()(const Input& input, KVCache<Scalar>& cache, const Mask& mask = Mask::causal()) {
    const auto X = detail::input3<Scalar>(input);
    Tensor3<Scalar> Y(X.dimension(0), X.dimension(1), num_hiddens());  // (batch, s, num_hiddens)
    (*this)(X, cache, mask, Y);
    return Y;
  }
  // The same into out (batch, s, num_hiddens); allocates nothing from the second call of a shape on.
  template <class Input, class Out>
  void operator()(const Input& input, KVCache<Scalar>& cache, const Mask& mask, Out&& out) {
    const auto X = detail::input3<Scalar>(input);
    auto Y = detail::output3<Scalar>(out);
    constexpr const char* where = "GroupedQueryAttention (cached)";
    const Index batch = X.dimension(0), steps = X.dimension(1);
    detail::require(cache.num_kv_heads() == num_kv_heads_ && cache.head_dim() == head_dim_, where,
                    ": the cache must hold ", num_kv_heads_, " key/value heads of ", head_dim_, ", got ",
                    cache.num_kv_heads(), " of ", cache.head_dim());
    cache.require_room(batch, steps, where);
    check(X, mask, cache.size() + steps, where);
    require_output(Y, X, where);
    const Index start = cache.size();
    project_all(X, workspace_);
    rotate(workspace_.Q, workspace_.K, start, false);
    // The decoding spans' memory for the largest cache this one can become, so that growing it allocates nothing.
    const Index largest = detail::core::partial_size(batch, num_kv_heads_, num_heads_ / num_kv_heads_, steps,
                                                     cache.capacity(), head_dim_);
    detail::core::Buffers<Scalar>::grow(workspace_.buffers.partial, largest);
    cache.append_rows(workspace_.K.data(), workspace_.V.data(), steps);
    detail::attention_heads<Scalar>(heads(workspace_.Q, num_heads_), cache.keys(), cache.values(), mask, options_,
                                    detail::AttentionDropout(), nullptr,
                                    detail::heads_of_map<Scalar>(workspace_.context, num_heads_), workspace_.buffers);
    project_into(W_o_, workspace_.context, Y);
  }

 private:
  static constexpr const char* module_name = "GroupedQueryAttention";

  // What backward() needs from the last operator() call.
  struct Record {
    Tensor3<Scalar> X;        // (batch, n, num_hiddens)
    Tensor3<Scalar> Q, K, V;  // (batch, n, heads * head_dim), after the rotation
    Tensor3<Scalar> context;  // (batch, n, num_heads * head_dim): the attention's output, W_o's input
    Tensor3<Scalar> lse;      // (batch, n, num_heads)
    Mask mask;
    detail::AttentionDropout dropout;
  };

  template <class Self, class Visit>
  static void visit_with_gradients_of(Self& self, Visit& visit) {
    self.W_q_.visit_with_gradients(detail::prefixed("W_q.", visit));
    self.W_k_.visit_with_gradients(detail::prefixed("W_k.", visit));
    self.W_v_.visit_with_gradients(detail::prefixed("W_v.", visit));
    self.W_o_.visit_with_gradients(detail::prefixed("W_o.", visit));
  }

  static Index checked_heads(Index num_hiddens, Index num_heads, Index num_kv_heads, Index head_dim) {
    constexpr const char* where = "GroupedQueryAttention";
    detail::require_at_least(num_hiddens, 1, where, "num_hiddens");
    detail::require_at_least(num_heads, 1, where, "num_heads");
    detail::require(num_kv_heads >= 1 && num_heads % num_kv_heads == 0, where,
                    ": num_kv_heads must be >= 1 and divide num_heads (", num_heads, "), got ", num_kv_heads);
    detail::require(head_dim >= 0, where, ": head_dim must be >= 0 (0: num_hiddens / num_heads), got ", head_dim);
    detail::require(head_dim > 0 || num_hiddens % num_heads == 0, where, ": with head_dim 0, num_heads (", num_heads,
                    ") must divide num_hiddens, got ", num_hiddens);
    return num_heads;
  }
  static Scalar checked_dropout(Scalar dropout) {
    detail::require_probability(dropout, "GroupedQueryAttention");
    return dropout;
  }

  template <class Map>
  void check(const Map& X, const Mask& mask, Index num_keys, const char* where) const {
    W_q_.require_parameters(where);
    W_k_.require_parameters(where);
    W_v_.require_parameters(where);
    W_o_.require_parameters(where);
    detail::require(X.dimension(2) == num_hiddens(), where, ": X must have ", num_hiddens(),
                    " features (num_hiddens), got ", X.dimension(2));
    mask.require_shape(X.dimension(0), X.dimension(1), num_keys, where);
    const detail::AttentionShape shape{X.dimension(0), X.dimension(1), num_keys, num_heads_,
                                       num_kv_heads_,  head_dim_,      head_dim_};
    detail::require_score_options(options_, shape, where);
  }
  template <class Out, class Map>
  void require_output(const Out& Y, const Map& X, const char* where) const {
    detail::require_shape(Y, {X.dimension(0), X.dimension(1), num_hiddens()}, where, "out",
                          "(batch, steps, num_hiddens)");
  }

  static void resize(Tensor3<Scalar>& T, Index a, Index b, Index c) {
    if (T.dimension(0) != a || T.dimension(1) != b || T.dimension(2) != c) T.resize(a, b, c);
  }
  // Y = X W^T + b on every step: X (batch, n, in) as rows.
  template <class Map, class Out>
  static void project_into(const Linear<Scalar>& W, const Map& X, Out& Y) {
    const Index rows = X.dimension(0) * X.dimension(1);
    W.apply(Eigen::Map<const Matrix<Scalar>>(X.data(), rows, X.dimension(2)),
            Eigen::Map<Matrix<Scalar>>(Y.data(), rows, Y.dimension(2)));
  }
  // workspace's Q, K and V = X's projections; its Q, K, V and context of X's batch and steps.
  template <class Map>
  void project_all(const Map& X, Workspace& workspace) const {
    const Index batch = X.dimension(0), steps = X.dimension(1);
    resize(workspace.Q, batch, steps, num_heads_ * head_dim_);
    resize(workspace.K, batch, steps, num_kv_heads_ * head_dim_);
    resize(workspace.V, batch, steps, num_kv_heads_ * head_dim_);
    resize(workspace.context, batch, steps, num_heads_ * head_dim_);
    project_into(W_q_, X, workspace.Q);
    project_into(W_k_, X, workspace.K);
    project_into(W_v_, X, workspace.V);
  }
  template <class Map>
  static Tensor3<Scalar> project(const Linear<Scalar>& W, const Map& X) {
    Tensor3<Scalar> Y(X.dimension(0), X.dimension(1), W.out_features());  // (batch, n, out_features)
    project_into(W, X, Y);
    return Y;
  }
  // Rotates queries and keys (or, inverse, their gradients), step t at position start + t.
  void rotate(Tensor3<Scalar>& Q, Tensor3<Scalar>& K, Index start, bool inverse) const {
    if (!rotary_) return;
    rotary_->apply_rows(Q.data(), Q.dimension(0), Q.dimension(1), Q.dimension(1), Q.dimension(2), num_heads_, start,
                        inverse);
    rotary_->apply_rows(K.data(), K.dimension(0), K.dimension(1), K.dimension(1), K.dimension(2), num_kv_heads_, start,
                        inverse);
  }
  static detail::Heads<const Scalar> heads(const Tensor3<Scalar>& X, Index count) {
    return detail::heads_of_map<const Scalar>(X, count);
  }

  Index num_heads_, num_kv_heads_, head_dim_;
  Scalar dropout_;
  Linear<Scalar> W_q_, W_k_, W_v_, W_o_;
  Generator generator_;
  std::optional<RotaryEmbedding<Scalar>> rotary_;
  ScoreOptions<Scalar> options_;
  std::optional<Record> record_;  // the last operator() call's, for backward()
  Workspace workspace_;  // the scratch of the training call, backward() and the cached call
};

}  // namespace ATTEND_ABI
}  // namespace attend
