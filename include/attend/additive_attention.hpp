// attend/additive_attention.hpp — additive attention, as d2l's AdditiveAttention.
//
//   score(q, k) = w_v^T tanh(W_q q + W_k k)          W_q, W_k, w_v: Linear layers without bias
//   weights = masked_softmax(scores, mask)            (batch, queries, keys); mask: valid lengths or any Mask
//   output  = dropout(weights) V                      (batch, queries, value_dim)
// Queries and keys may have different sizes; the constructor's argument order is d2l's.
// state_dict() uses d2l's names: W_k.weight, W_q.weight, w_v.weight.
//
// Training: operator() records its inputs, the projections and the dropout seed for backward(grad_output). With
// f_ij = tanh(q_i + k_j), dS the gradient of the scores (softmax_backward_row, detail/kernels/softmax-inl.hpp) and F
// the dropout's factors:  dV = (P F)^T dO;  dS = softmax_backward(P, (dO V^T) F);  dw_v += sum_ij dS_ij f_ij;
// dq_i += sum_j dS_ij w_v (1 - f_ij^2), dk_j likewise over i; then W_q's and W_k's backward passes.
#pragma once

#include <attend/attention_gradients.hpp>
#include <attend/config.hpp>
#include <attend/detail/attend_rows.hpp>
#include <attend/detail/attention_dropout.hpp>
#include <attend/detail/softmax.hpp>
#include <attend/detail/views.hpp>
#include <attend/linear.hpp>
#include <attend/mask.hpp>
#include <attend/masked_softmax.hpp>
#include <attend/module.hpp>
#include <attend/parameter.hpp>
#include <attend/random.hpp>
#include <attend/state_dict.hpp>
#include <attend/tensor.hpp>
#include <attend/valid_lens.hpp>
#include <string>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {

template <class Scalar>
class AdditiveAttention : public Module, public detail::WithParameters<AdditiveAttention<Scalar>, Scalar> {
 public:
  // Parameters are drawn in d2l's order: W_k, W_q, w_v. Every argument is checked before the first draw, so a
  // constructor that throws leaves `generator` where it was.
  AdditiveAttention(Index key_size, Index query_size, Index num_hiddens, Scalar dropout,
                    Generator& generator = default_generator())
      : W_k_(checked(key_size, query_size, num_hiddens, dropout), num_hiddens, false, generator),
        W_q_(query_size, num_hiddens, false, generator),
        w_v_(num_hiddens, 1, false, generator),
        dropout_(dropout),
        generator_(generator.next()) {}

  // queries (batch, q, query_size), keys (batch, k, key_size), values (batch, k, v) -> (batch, q, v)
  // mask: none; valid lengths (batch,) or (batch, q); or any Mask, keep tensor (batch or 1, q, k)
  // Keeps the weights (attention_weights()) and records the call for backward(). Each tensor argument is a Tensor3
  // or a map of one (TensorMap3, ConstTensorMap3), read in place, as every tensor argument below.
  template <class Queries, class Keys, class Values>
  Tensor3<Scalar> operator()(const Queries& queries_in, const Keys& keys_in, const Values& values_in,
                             const Mask& mask = {}) {
    const ConstTensorMap3<Scalar> queries = detail::input3<Scalar>(queries_in), keys = detail::input3<Scalar>(keys_in),
                                  values = detail::input3<Scalar>(values_in);
    check(queries, keys, values, mask, "AdditiveAttention");
    const bool drop = is_training() && dropout_ > Scalar(0);
    const detail::AttentionDropout dropout =
        drop ? detail::AttentionDropout(static_cast<double>(dropout_), generator_.next()) : detail::AttentionDropout();
    recorded_ = false;
    Tensor3<Scalar> weights;                                               // (batch, q, k)
    Tensor3<Scalar> output(queries.dimension(0), queries.dimension(1), values.dimension(2));  // (batch, q, v)
    run(queries, keys, values, mask, dropout, weights, record_.q, record_.k, detail::output3<Scalar>(output));
    attention_weights_ = std::move(weights);
    record_.queries = queries;
    record_.keys = keys;
    record_.values = values;
    record_.mask = mask;
    record_.dropout = dropout;
    recorded_ = true;
    return output;
  }

  // The evaluation-mode output, whatever is_training(): no dropout, nothing kept or recorded.
  template <class Queries, class Keys, class Values>
  Tensor3<Scalar> forward(const Queries& queries_in, const Keys& keys_in, const Values& values_in,
                          const Mask& mask = {}) const {
    const ConstTensorMap3<Scalar> queries = detail::input3<Scalar>(queries_in), keys = detail::input3<Scalar>(keys_in),
                                  values = detail::input3<Scalar>(values_in);
    check(queries, keys, values, mask, "AdditiveAttention::forward");
    Tensor3<Scalar> output(queries.dimension(0), queries.dimension(1), values.dimension(2));  // (batch, q, v)
    Tensor3<Scalar> weights, q, k;  // (batch, q, k), (batch, q, num_hiddens), (batch, k, num_hiddens)
    run(queries, keys, values, mask, detail::AttentionDropout(), weights, q, k, detail::output3<Scalar>(output));
    return output;
  }
  // The same into out (batch, q, v): a Tensor3 of that shape or a TensorMap3 of the caller's memory, apart from the
  // inputs'. The weights and projections are the call's own scratch.
  template <class Queries, class Keys, class Values, class Out>
  void forward(const Queries& queries_in, const Keys& keys_in, const Values& values_in, const Mask& mask,
               Out&& out_arg) const {
    constexpr const char* where = "AdditiveAttention::forward";
    const ConstTensorMap3<Scalar> queries = detail::input3<Scalar>(queries_in), keys = detail::input3<Scalar>(keys_in),
                                  values = detail::input3<Scalar>(values_in);
    const TensorMap3<Scalar> out = detail::output3<Scalar>(out_arg);
    check(queries, keys, values, mask, where);
    detail::require_out<Scalar>(out, {queries.dimension(0), queries.dimension(1), values.dimension(2)}, where,
                                "(batch, queries, value_dim)", {{&values, "values"}});
    Tensor3<Scalar> weights, q, k;  // (batch, q, k), (batch, q, num_hiddens), (batch, k, num_hiddens)
    run(queries, keys, values, mask, detail::AttentionDropout(), weights, q, k, out);
  }

  // grad_output (batch, q, v), the gradient of the last operator() call's output -> AttentionGradients {queries,
  // keys, values} of that call's shapes; adds the gradients of W_q, W_k and w_v. Throws std::logic_error when no
  // call was recorded, std::invalid_argument for a grad_output of another shape or a parameter or gradient resized;
  // a call that throws changes nothing.
  template <class GradOutput>
  AttentionGradients<Scalar> backward(const GradOutput& grad_output_in) {
    constexpr const char* where = "AdditiveAttention::backward";
    const ConstTensorMap3<Scalar> grad_output = detail::input3<Scalar>(grad_output_in);
    detail::require_recorded(recorded_, where, "AdditiveAttention");
    W_q_.require_parameters(where);
    W_k_.require_parameters(where);
    w_v_.require_parameters(where);
    this->require_gradients(where);
    const Record& r = record_;
    const Index batch = r.queries.dimension(0), num_queries = r.queries.dimension(1), num_keys = r.keys.dimension(1);
    const Index hiddens = w_v_.in_features(), dv = r.values.dimension(2);
    detail::require_shape(grad_output, {batch, num_queries, dv}, where, "grad_output", "(batch, queries, value_dim)");
    const auto w_v = w_v_.weight().row(0).transpose();  // (num_hiddens)
    AttentionGradients<Scalar> g{Tensor3<Scalar>(), Tensor3<Scalar>(), Tensor3<Scalar>(r.values.dimensions())};
    Tensor3<Scalar> dq(batch, num_queries, hiddens), dk(batch, num_keys, hiddens);  // dL/d(projections)
    dq.setZero();
    dk.setZero();
    Matrix<Scalar> dw_v = Matrix<Scalar>::Zero(1, hiddens);  // (1, num_hiddens)
    Matrix<Scalar> dropped, dP;                              // (q, k) each
    Vector<Scalar> f(hiddens), d_pre(hiddens);               // (num_hiddens) each
    for (Index b = 0; b < batch; ++b) {
      const auto P = detail::slice(attention_weights_, b);  // (q, k)
      const auto dO = detail::slice(grad_output, b);        // (q, v)
      const auto V = detail::slice(r.values, b);            // (k, v)
      dropped = P;
      for (Index i = 0; i < num_queries; ++i) r.dropout.apply(dropped.data() + i * num_keys, num_keys, b, i, Index(0));
      detail::slice(g.values, b).noalias() = dropped.transpose() * dO;  // (k, v)
      dP.noalias() = dO * V.transpose();                                // (q, k)
      for (Index i = 0; i < num_queries; ++i) {
        Scalar* row = dP.data() + i * num_keys;
        r.dropout.apply(row, num_keys, b, i, Index(0));
        const VisibleKeys seen = r.mask.visible_keys(b, i, num_queries, num_keys);
        detail::softmax_backward_row(P.data() + i * num_keys, row, row, num_keys, seen);
        seen.for_each([&](Index j) {  // a masked key's dS is 0: it adds nothing
          f = (detail::slice(r.q, b).row(i) + detail::slice(r.k, b).row(j)).transpose().array().tanh().matrix();
          dw_v.row(0) += dP(i, j) * f.transpose();
          d_pre = dP(i, j) * (w_v.array() * (Scalar(1) - f.array().square())).matrix();
          detail::slice(dq, b).row(i) += d_pre.transpose();
          detail::slice(dk, b).row(j) += d_pre.transpose();
        });
      }
    }
    w_v_.weight_grad() += dw_v;
    g.queries = W_q_.backward_from(r.queries, dq);
    g.keys = W_k_.backward_from(r.keys, dk);
    return g;
  }

  Linear<Scalar>& W_q() { return W_q_; }  // (num_hiddens, query_size), no bias
  Linear<Scalar>& W_k() { return W_k_; }  // (num_hiddens, key_size), no bias
  Linear<Scalar>& w_v() { return w_v_; }  // (1, num_hiddens), no bias
  // (batch, q, k) of the last call, before dropout.
  const Tensor3<Scalar>& attention_weights() const { return attention_weights_; }
  Scalar dropout() const { return dropout_; }
  Generator& generator() { return generator_; }

  // zero_grad(), parameters(), state_dict(), load_state_dict(), visit_parameters(), visit_with_gradients() and
  // require_gradients(): detail::WithParameters (parameter.hpp), over d2l's names and order: W_k.weight
  // (num_hiddens, key_size), W_q.weight (num_hiddens, query_size), w_v.weight (1, num_hiddens).

 private:
  // What operator() keeps for backward().
  struct Record {
    Tensor3<Scalar> queries, keys, values;  // the call's inputs
    Tensor3<Scalar> q, k;                   // (batch, q, num_hiddens), (batch, k, num_hiddens): the projections
    Mask mask;
    detail::AttentionDropout dropout;
  };

  void check(const ConstTensorMap3<Scalar>& queries, const ConstTensorMap3<Scalar>& keys,
             const ConstTensorMap3<Scalar>& values, const Mask& mask, const char* where) const {
    W_q_.require_parameters(where, " W_q");
    W_k_.require_parameters(where, " W_k");
    w_v_.require_parameters(where, " w_v");
    detail::require_dim(queries, 2, W_q_.in_features(), where, "queries", "features (query_size)");
    detail::require_dim(keys, 2, W_k_.in_features(), where, "keys", "features (key_size)");
    detail::require_same_dim(queries, keys, 0, where, "queries", "keys", "batch size");
    detail::require_same_dim(keys, values, 0, where, "keys", "values", "batch size");
    detail::require_same_dim(keys, values, 1, where, "keys", "values", "number of steps");
    mask.require_shape(queries.dimension(0), queries.dimension(1), keys.dimension(1), where);
  }

  // The forward pass on checked arguments into output (batch, q, v): the weights (batch, q, k) and the projections
  // q, k into the caller's tensors; dropout on the weights that multiply the values (pair b for batch row b).
  void run(const ConstTensorMap3<Scalar>& queries, const ConstTensorMap3<Scalar>& keys,
           const ConstTensorMap3<Scalar>& values, const Mask& mask, const detail::AttentionDropout& dropout,
           Tensor3<Scalar>& weights, Tensor3<Scalar>& q, Tensor3<Scalar>& k, const TensorMap3<Scalar>& output) const {
    const Index batch = queries.dimension(0), num_queries = queries.dimension(1), num_keys = keys.dimension(1);
    q = W_q_.forward(queries);                          // (batch, q, num_hiddens)
    k = W_k_.forward(keys);                             // (batch, k, num_hiddens)
    const auto w_v = w_v_.weight().row(0).transpose();  // (num_hiddens)
    weights.resize(batch, num_queries, num_keys);
    for (Index b = 0; b < batch; ++b) {
      const auto k_b = detail::slice(k, b);     // (k, num_hiddens)
      auto scores = detail::slice(weights, b);  // (q, k)
      for (Index i = 0; i < num_queries; ++i) {
        // features: (k, num_hiddens) = tanh(q_i + k_j) for every key j
        const Matrix<Scalar> features = (k_b.rowwise() + detail::slice(q, b).row(i)).array().tanh().matrix();
        scores.row(i).noalias() = (features * w_v).transpose();
      }
      auto out = detail::slice(output, b);  // (q, v)
      detail::attend_rows(scores, mask, b, detail::slice(values, b), out, dropout);
    }
  }

  friend class detail::WithParameters<AdditiveAttention<Scalar>, Scalar>;
  static constexpr const char* module_name = "AdditiveAttention";

  // Calls visit(name, parameter, gradient, shape) for each parameter of self (an AdditiveAttention or a const one).
  template <class Self, class Visit>
  static void visit_with_gradients_of(Self& self, Visit& visit) {
    self.W_k_.visit_with_gradients(detail::prefixed("W_k.", visit));
    self.W_q_.visit_with_gradients(detail::prefixed("W_q.", visit));
    self.w_v_.visit_with_gradients(detail::prefixed("w_v.", visit));
  }

  // Checks every constructor argument; returns key_size.
  static Index checked(Index key_size, Index query_size, Index num_hiddens, Scalar dropout) {
    detail::require_at_least(key_size, 1, "AdditiveAttention", "key_size");
    detail::require_at_least(query_size, 1, "AdditiveAttention", "query_size");
    detail::require_at_least(num_hiddens, 1, "AdditiveAttention", "num_hiddens");
    detail::require_probability(dropout, "AdditiveAttention");
    return key_size;
  }

  Linear<Scalar> W_k_;
  Linear<Scalar> W_q_;
  Linear<Scalar> w_v_;
  Scalar dropout_;
  Generator generator_;
  Tensor3<Scalar> attention_weights_;  // (batch, q, k)
  Record record_;                      // of the last operator() call
  bool recorded_ = false;
};

}  // namespace ATTEND_ABI
}  // namespace attend
