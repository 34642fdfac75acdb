// attend/multi_head_attention.hpp — multi-head attention, as d2l's MultiHeadAttention.
//
//   Q = queries W_q^T   K = keys W_k^T   V = values W_v^T             each (batch * steps, num_hiddens)
//   head h of batch row b: scaled dot-product attention on columns h*d .. h*d + d - 1,   d = num_hiddens / num_heads
//   output = concat_h(head outputs) W_o^T                                (batch, queries, num_hiddens)
//
// This is the seed's computation, step for step, except that the heads are never copied out: each projection is
// one GEMM over all batch rows, and every head reads its Q, K, V and writes its output through strided column
// blocks (what transpose_qkv / transpose_output would lay out, without building it). The mask of batch row b (valid
// lengths, causal, a keep tensor row; see mask.hpp) applies to all its heads (d2l's repeat_interleave);
// attention_weights() row b * num_heads + h is head h of row b.
//
// Two paths compute the heads (attention_path.hpp): the direct one above, which keeps the weights, and a tiled
// online-softmax kernel that forms none, taken automatically when the weights would not fit the cache budget;
// set_path() chooses explicitly. operator() reuses a workspace of its own, so a call with the shapes of the previous
// one allocates only its output and its record (and, on the direct path, nothing new for its weights). forward() is
// the const, reentrant evaluation-mode pass: any number of threads may call it at once on one module, as long as
// none modifies the module meanwhile (operator(), train(), eval(), set_path(), weight(), load_state_dict()).
//
// Training: operator() records its inputs, projections and heads for backward(grad_output), which returns the
// gradients of queries, keys and values and adds those of the four Linear layers into their weight_grad() and
// bias_grad(), on the path the call took (detail/attention_backward.hpp).
//
// Of bfloat16 (evaluation only): each projection is a Linear<bfloat16>, the heads run on the tiled path in float on
// the stored values, and each result (Q, K, V, the heads' output, the output) is rounded once; operator() records
// nothing, and backward() does not compile.
//
// state_dict() uses d2l's names: W_q.weight, W_q.bias (when bias is on), W_k.*, W_v.*, W_o.*. A PyTorch
// nn.MultiheadAttention's state dict, whose names differ, converts with multi_head_attention_from_torch
// (from_torch.hpp).
#pragma once

#include <attend/config.hpp>

#include <attend/attention_gradients.hpp>
#include <attend/attention_path.hpp>
#include <attend/detail/attention_backward.hpp>
#include <attend/detail/attend_rows.hpp>
#include <attend/detail/core/attention.hpp>
#include <attend/detail/heads.hpp>
#include <attend/detail/modules/attention_path_module.hpp>
#include <attend/detail/project_rows.hpp>
#include <attend/linear.hpp>
#include <attend/mask.hpp>
#include <attend/module.hpp>
#include <attend/parameter.hpp>
#include <attend/random.hpp>
#include <attend/scaled_dot_product_attention.hpp>
#include <attend/state_dict.hpp>
#include <attend/tensor.hpp>
#include <attend/valid_lens.hpp>
#include <attend/workspace.hpp>

#include <string>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {

template <class Scalar>
class MultiHeadAttention : public detail::AttentionPathModule<MultiHeadAttention<Scalar>, Scalar>,
                           public detail::WithParameters<MultiHeadAttention<Scalar>, Scalar> {
  using Base = detail::AttentionPathModule<MultiHeadAttention<Scalar>, Scalar>;
  friend Base;
  friend class detail::WithParameters<MultiHeadAttention<Scalar>, Scalar>;

 public:
  // Parameters are drawn in d2l's order: W_q, W_k, W_v, W_o.
  MultiHeadAttention(Index key_size, Index query_size, Index value_size, Index num_hiddens, Index num_heads,
                     Scalar dropout, bool bias = false, Generator& generator = default_generator())
      : num_heads_(checked_sizes(key_size, query_size, value_size, num_hiddens, num_heads)),
        dropout_(checked_dropout(dropout)),
        W_q_(query_size, num_hiddens, bias, generator),
        W_k_(key_size, num_hiddens, bias, generator),
        W_v_(value_size, num_hiddens, bias, generator),
        W_o_(num_hiddens, num_hiddens, bias, generator),
        generator_(generator.next()) {}

  // operator()(queries, keys, values, mask = {}):
  //   queries (batch, q, query_size), keys (batch, k, key_size), values (batch, k, value_size)
  //     -> (batch, q, num_hiddens)
  //   mask: none; valid lengths (batch,) or (batch, q); or any Mask, keep tensor (batch or 1, q, k); batch row b's
  //   mask applies to all its heads. Dropout in training mode; the weights kept when the call takes the direct path.
  using Base::operator();

  // forward(queries, keys, values, mask = {}) const: the evaluation-mode output, whatever is_training(): no dropout,
  // no weights kept, nothing in the module changed. Safe to call from many threads at once (see the top of this
  // file); same arguments and result as operator().
  // forward(queries, keys, values, mask, AttentionWorkspace<Scalar>& workspace) const: the same, with the caller's
  // workspace (one per thread): repeated calls of one shape allocate only the output.
  // forward(queries, keys, values, mask, workspace, out) const: the same into out, a Tensor3 of the output's shape or
  // a TensorMap3 of the caller's memory: repeated calls of one shape allocate nothing.
  // Every tensor argument is a Tensor3 or a map of one (TensorMap3, ConstTensorMap3), read in place; one tensor (or
  // maps of the same memory) as queries, keys and values is self-attention.
  using Base::forward;

  // set_path(AttentionPath), path(): which implementation computes the heads: automatic (default), direct or tiled;
  // see attention_path.hpp. set_path throws std::invalid_argument on a value outside the enum.
  using Base::path;
  using Base::set_path;

  // backward(grad_output): grad_output (batch, q, num_hiddens), the gradient of the last operator() call's output ->
  // AttentionGradients {queries, keys, values} of that call's shapes; adds the gradients of W_q, W_k, W_v and W_o
  // (W_q().weight_grad(), W_q().bias_grad(), ...). Throws std::logic_error when no call was recorded,
  // std::invalid_argument for a grad_output of another shape or a parameter or gradient resized; a call that throws
  // changes nothing.
  using Base::backward;

  Linear<Scalar>& W_q() { return W_q_; }  // (num_hiddens, query_size)
  Linear<Scalar>& W_k() { return W_k_; }  // (num_hiddens, key_size)
  Linear<Scalar>& W_v() { return W_v_; }  // (num_hiddens, value_size)
  Linear<Scalar>& W_o() { return W_o_; }  // (num_hiddens, num_hiddens)
  Index num_heads() const { return num_heads_; }
  Index num_hiddens() const { return W_o_.out_features(); }
  Scalar dropout() const { return dropout_; }
  Generator& generator() { return generator_; }
  // attention_weights(): (batch * num_heads, q, k) of the last call, before dropout; row b * num_heads + h is head h
  // of batch row b. Empty before the first call; throws std::logic_error after a call that took the tiled path,
  // which forms none.
  using Base::attention_weights;

  // zero_grad(), parameters(), state_dict(), load_state_dict(), visit_parameters(), visit_with_gradients() and
  // require_gradients(): detail::WithParameters (parameter.hpp), over d2l's names and order: W_q.weight
  // (num_hiddens, query_size), W_q.bias (num_hiddens) when bias is on, then W_k, W_v and W_o alike.

 private:
  // The names in its messages.
  static constexpr const char* name = "MultiHeadAttention";
  static constexpr const char* module_name = name;
  static constexpr const char* forward_name = "MultiHeadAttention::forward";

  void check(const ConstTensorMap3<Scalar>& queries, const ConstTensorMap3<Scalar>& keys,
             const ConstTensorMap3<Scalar>& values, const Mask& mask, const char* where) const {
    check_parameters(name);
    detail::require_dim(queries, 2, W_q_.in_features(), where, "queries", "features (query_size)");
    detail::require_dim(keys, 2, W_k_.in_features(), where, "keys", "features (key_size)");
    detail::require_dim(values, 2, W_v_.in_features(), where, "values", "features (value_size)");
    detail::require_same_dim(queries, keys, 0, where, "queries", "keys", "batch size");
    detail::require_same_dim(keys, values, 0, where, "keys", "values", "batch size");
    detail::require_same_dim(keys, values, 1, where, "keys", "values", "number of steps");
    mask.require_shape(queries.dimension(0), queries.dimension(1), keys.dimension(1), where);
  }

  // The elements of the (batch * num_heads, q, k) weights the direct path forms.
  Index weights_count(const ConstTensorMap3<Scalar>& queries, const ConstTensorMap3<Scalar>& keys) const {
    return queries.dimension(0) * num_heads_ * queries.dimension(1) * keys.dimension(1);
  }

  template <class Values>
  Index output_features(const Values&) const {
    return W_o_.out_features();
  }

  void check_backward(const char* where) const {
    check_parameters(where);
    this->require_gradients(where);
  }

  void check_parameters(const char* where) const {
    W_q_.require_parameters(where, " W_q");
    W_k_.require_parameters(where, " W_k");
    W_v_.require_parameters(where, " W_v");
    W_o_.require_parameters(where, " W_o");
  }

  // The forward pass on checked arguments, into output (batch, q, num_hiddens). weights: where the direct path keeps
  // them, or null (the workspace's are used); tiled: the path; record: where to keep the projections, the heads and
  // the tiled path's log-sum-exp, or null.
  void run(const ConstTensorMap3<Scalar>& queries, const ConstTensorMap3<Scalar>& keys,
           const ConstTensorMap3<Scalar>& values, const Mask& mask, AttentionWorkspace<Scalar>& ws,
           Tensor3<Scalar>* weights, const detail::AttentionDropout& dropout, bool tiled,
           detail::AttentionRecord<Scalar>* record, const TensorMap3<Scalar>& output) const {
    const Index batch = queries.dimension(0), num_queries = queries.dimension(1), num_keys = keys.dimension(1);
    const Index num_hiddens = W_o_.out_features();
    ws.Q.resize(batch * num_queries, num_hiddens);  // (batch * q, num_hiddens)
    ws.K.resize(batch * num_keys, num_hiddens);     // (batch * k, num_hiddens)
    ws.V.resize(batch * num_keys, num_hiddens);     // (batch * k, num_hiddens)
    const auto into = [](const Linear<Scalar>& linear, Matrix<Scalar>& Y, detail::TransposedWeight<Scalar>& kept) {
      return detail::projection(linear.weight(), linear.bias(), Y.data(), &kept);
    };
    if constexpr (detail::is_reduced<Scalar>) {  // bfloat16: each weight read in place (Linear::apply)
      W_q_.apply(detail::as_matrix(queries), ws.Q);
      W_k_.apply(detail::as_matrix(keys), ws.K);
      W_v_.apply(detail::as_matrix(values), ws.V);
    } else if (detail::same_memory(queries, keys) && detail::same_memory(keys, values)) {  // self: one pass over X
      detail::project_rows<Scalar>(detail::as_matrix(queries),
                                   {into(W_q_, ws.Q, ws.W_q), into(W_k_, ws.K, ws.W_k), into(W_v_, ws.V, ws.W_v)});
    } else {
      detail::project_rows<Scalar>(detail::as_matrix(queries), {into(W_q_, ws.Q, ws.W_q)});
      detail::project_rows<Scalar>(detail::as_matrix(keys), {into(W_k_, ws.K, ws.W_k)});
      detail::project_rows<Scalar>(detail::as_matrix(values), {into(W_v_, ws.V, ws.W_v)});
    }

    ws.heads.resize(batch * num_queries, num_hiddens);  // (batch * q, num_heads * d): concatenated heads
    const Matrix<Scalar>&Q = ws.Q, &K = ws.K, &V = ws.V;  // read-only views of the projections' heads
    const auto Qh = detail::heads_of(Q, batch, num_queries, num_heads_);  // (batch, q) steps of h heads of d
    const auto Kh = detail::heads_of(K, batch, num_keys, num_heads_);     // (batch, k) steps of h heads of d
    const auto Vh = detail::heads_of(V, batch, num_keys, num_heads_);     // (batch, k) steps of h heads of d
    const auto out = detail::heads_of(ws.heads, batch, num_queries, num_heads_);
    if (tiled) {  // the record's lse (batch, q, heads), when there is a record
      detail::attention_heads<Scalar>(Qh, Kh, Vh, mask, {}, dropout, record != nullptr ? &record->lse : nullptr, out,
                                      ws.core);
    } else if constexpr (!detail::is_reduced<Scalar>) {
      detail::scaled_dot_product_heads<Scalar>(Qh, Kh, Vh, mask, weights != nullptr ? *weights : ws.weights, out,
                                               dropout, &ws.direct);
    }

    if constexpr (detail::is_reduced<Scalar>)
      W_o_.apply(ws.heads, Eigen::Map<Matrix<Scalar>>(output.data(), batch * num_queries, num_hiddens));
    else
      detail::project_rows<Scalar>(ws.heads,
                                   {detail::projection(W_o_.weight(), W_o_.bias(), output.data(), &ws.W_o)});
    if (record != nullptr) {  // the record takes the buffers; the workspace gets the previous record's, same sizes
      record->Q.swap(ws.Q);
      record->K.swap(ws.K);
      record->V.swap(ws.V);
      record->heads.swap(ws.heads);
    }
  }

  // The backward pass of a recorded call: W_o, the heads (on that call's path), then W_q, W_k, W_v.
  AttentionGradients<Scalar> backward_pass(const detail::AttentionRecord<Scalar>& r, const Tensor3<Scalar>* weights,
                                           const ConstTensorMap3<Scalar>& grad_output,
                                           detail::HeadsBackwardBuffers<Scalar>& buffers) {
    const Tensor3<Scalar>&queries = r.queries, &keys = r.keys_in(), &values = r.values_in();
    const Index batch = queries.dimension(0), num_queries = queries.dimension(1), num_keys = keys.dimension(1);
    const Index num_hiddens = W_o_.out_features();
    // Kept between calls (backward_buffers_): a repeated backward pass of one shape reuses their memory.
    Matrix<Scalar>& d_heads = backward_buffers_.d_heads;  // (batch * q, num_hiddens): dL/d(concatenated heads)
    d_heads.resize(batch * num_queries, num_hiddens);
    W_o_.backward_rows(r.heads, detail::as_matrix(grad_output), d_heads.data());
    Matrix<Scalar>&dQ = backward_buffers_.dQ, &dK = backward_buffers_.dK, &dV = backward_buffers_.dV;
    dQ.resize(batch * num_queries, num_hiddens);  // dL/d(projections), as Q, K, V
    dK.resize(batch * num_keys, num_hiddens);
    dV.resize(batch * num_keys, num_hiddens);
    const auto heads = [&](auto& X, Index length) { return detail::heads_of(X, batch, length, num_heads_); };
    const Matrix<Scalar>& d_heads_in = d_heads;
    detail::attention_heads_backward<Scalar>(heads(r.Q, num_queries), heads(r.K, num_keys), heads(r.V, num_keys),
                                             r.mask, r.dropout, weights, heads(r.heads, num_queries), r.lse,
                                             heads(d_heads_in, num_queries), heads(dQ, num_queries),
                                             heads(dK, num_keys), heads(dV, num_keys), buffers);
    AttentionGradients<Scalar> g{Tensor3<Scalar>(queries.dimensions()), Tensor3<Scalar>(keys.dimensions()),
                                 Tensor3<Scalar>(values.dimensions())};
    W_q_.backward_rows(detail::as_matrix(queries), dQ, g.queries.data());
    W_k_.backward_rows(detail::as_matrix(keys), dK, g.keys.data());
    W_v_.backward_rows(detail::as_matrix(values), dV, g.values.data());
    return g;
  }

  // Calls visit(name, parameter, gradient, shape) for each parameter of self (a MultiHeadAttention or a const one).
  template <class Self, class Visit>
  static void visit_with_gradients_of(Self& self, Visit& visit) {
    self.W_q_.visit_with_gradients(detail::prefixed("W_q.", visit));
    self.W_k_.visit_with_gradients(detail::prefixed("W_k.", visit));
    self.W_v_.visit_with_gradients(detail::prefixed("W_v.", visit));
    self.W_o_.visit_with_gradients(detail::prefixed("W_o.", visit));
  }

  // Every size, checked before any parameter is drawn: a constructor that throws leaves the generator as it was.
  static Index checked_sizes(Index key_size, Index query_size, Index value_size, Index num_hiddens, Index num_heads) {
    detail::require_at_least(key_size, 1, "MultiHeadAttention", "key_size");
    detail::require_at_least(query_size, 1, "MultiHeadAttention", "query_size");
    detail::require_at_least(value_size, 1, "MultiHeadAttention", "value_size");
    detail::require_at_least(num_hiddens, 1, "MultiHeadAttention", "num_hiddens");
    detail::require_at_least(num_heads, 1, "MultiHeadAttention", "num_heads");
    detail::require(num_hiddens % num_heads == 0, "MultiHeadAttention: num_hiddens (", num_hiddens,
                    ") must be divisible by num_heads (", num_heads, ")");
    return num_heads;
  }
  static Scalar checked_dropout(Scalar dropout) {
    detail::require_probability(dropout, "MultiHeadAttention");
    return dropout;
  }

  Index num_heads_;
  Scalar dropout_;
  Linear<Scalar> W_q_;
  Linear<Scalar> W_k_;
  Linear<Scalar> W_v_;
  Linear<Scalar> W_o_;
  Generator generator_;
  // The backward pass's intermediate gradients, scratch that holds nothing between calls: kept so that the memory of
  // one step is reused by the next (freed and taken again, blocks of this size are returned to the system and faulted
  // back in on every step).
  struct BackwardBuffers {
    Matrix<Scalar> d_heads, dQ, dK, dV;
  } backward_buffers_;
};

}  // namespace ATTEND_ABI
}  // namespace attend
