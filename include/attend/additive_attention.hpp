// attend/additive_attention.hpp — additive attention, as d2l's AdditiveAttention.
//
//   score(q, k) = w_v^T tanh(W_q q + W_k k)          W_q, W_k, w_v: Linear layers without bias
//   weights = masked_softmax(scores, mask)            (batch, queries, keys); mask: valid lengths or any Mask
//   output  = dropout(weights) V                      (batch, queries, value_dim)
// Queries and keys may have different sizes; the constructor's argument order is d2l's.
// state_dict() uses d2l's names: W_k.weight, W_q.weight, w_v.weight.
#pragma once

#include <attend/config.hpp>

#include <attend/detail/attend_rows.hpp>
#include <attend/linear.hpp>
#include <attend/mask.hpp>
#include <attend/module.hpp>
#include <attend/random.hpp>
#include <attend/state_dict.hpp>
#include <attend/tensor.hpp>
#include <attend/valid_lens.hpp>

namespace attend {
inline namespace ATTEND_ABI {

template <class Scalar>
class AdditiveAttention : public Module {
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
  Tensor3<Scalar> operator()(const Tensor3<Scalar>& queries, const Tensor3<Scalar>& keys, const Tensor3<Scalar>& values,
                             const Mask& mask = {}) {
    constexpr const char* where = "AdditiveAttention";
    W_q_.require_parameters("AdditiveAttention W_q");
    W_k_.require_parameters("AdditiveAttention W_k");
    w_v_.require_parameters("AdditiveAttention w_v");
    detail::require_dim(queries, 2, W_q_.in_features(), where, "queries", "features (query_size)");
    detail::require_dim(keys, 2, W_k_.in_features(), where, "keys", "features (key_size)");
    detail::require_same_dim(queries, keys, 0, where, "queries", "keys", "batch size");
    detail::require_same_dim(keys, values, 0, where, "keys", "values", "batch size");
    detail::require_same_dim(keys, values, 1, where, "keys", "values", "number of steps");
    const Index batch = queries.dimension(0), num_queries = queries.dimension(1), num_keys = keys.dimension(1);
    mask.require_shape(batch, num_queries, num_keys, where);

    const Tensor3<Scalar> q = W_q_(queries);                          // (batch, q, num_hiddens)
    const Tensor3<Scalar> k = W_k_(keys);                             // (batch, k, num_hiddens)
    const auto w_v = w_v_.weight().row(0).transpose();                // (num_hiddens)
    Tensor3<Scalar> weights(batch, num_queries, num_keys);            // (batch, q, k)
    Tensor3<Scalar> output(batch, num_queries, values.dimension(2));  // (batch, q, v)
    const bool drop = is_training() && dropout_ > Scalar(0);
    for (Index b = 0; b < batch; ++b) {
      const auto k_b = detail::slice(k, b);     // (k, num_hiddens)
      auto scores = detail::slice(weights, b);  // (q, k)
      for (Index i = 0; i < num_queries; ++i) {
        // features: (k, num_hiddens) = tanh(q_i + k_j) for every key j
        const Matrix<Scalar> features = (k_b.rowwise() + detail::slice(q, b).row(i)).array().tanh().matrix();
        scores.row(i).noalias() = (features * w_v).transpose();
      }
      auto out = detail::slice(output, b);  // (q, v)
      detail::attend_rows(scores, mask, b, detail::slice(values, b), out, dropout_, drop ? &generator_ : nullptr);
    }
    attention_weights_ = std::move(weights);
    return output;
  }

  Linear<Scalar>& W_q() { return W_q_; }  // (num_hiddens, query_size), no bias
  Linear<Scalar>& W_k() { return W_k_; }  // (num_hiddens, key_size), no bias
  Linear<Scalar>& w_v() { return w_v_; }  // (1, num_hiddens), no bias
  // (batch, q, k) of the last call, before dropout.
  const Tensor3<Scalar>& attention_weights() const { return attention_weights_; }
  Scalar dropout() const { return dropout_; }
  Generator& generator() { return generator_; }

  // W_k.weight (num_hiddens, key_size), W_q.weight (num_hiddens, query_size), w_v.weight (1, num_hiddens), in
  // d2l's order; see state_dict.hpp.
  StateDict<Scalar> state_dict() const {
    return detail::state_dict_of<Scalar>(*this, "AdditiveAttention::state_dict");
  }
  void load_state_dict(const StateDict<Scalar>& dict) {
    detail::load_state_dict_into(*this, dict, "AdditiveAttention::load_state_dict");
  }

  // Calls visit(name, parameter, shape) for each parameter, in d2l's order: W_k, W_q, w_v.
  template <class Visit>
  void visit_parameters(Visit&& visit) {
    visit_parameters_of(*this, visit);
  }
  template <class Visit>
  void visit_parameters(Visit&& visit) const {
    visit_parameters_of(*this, visit);
  }

 private:
  template <class Self, class Visit>
  static void visit_parameters_of(Self& self, Visit& visit) {
    self.W_k_.visit_parameters(detail::prefixed("W_k.", visit));
    self.W_q_.visit_parameters(detail::prefixed("W_q.", visit));
    self.w_v_.visit_parameters(detail::prefixed("w_v.", visit));
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
};

}  // namespace ATTEND_ABI
}  // namespace attend
