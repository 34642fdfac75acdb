// attend/dot_product_attention.hpp — scaled dot-product attention, as d2l's DotProductAttention.
//
//   weights = masked_softmax(Q K^T / sqrt(d), mask)              (batch, queries, keys)
//   output  = dropout(weights) V                                  (batch, queries, value_dim)
// The mask is d2l's valid lengths or any attend::Mask (causal, a keep tensor, their AND); see mask.hpp.
// It has no parameters: state_dict() is empty, as d2l's.
#pragma once

#include <attend/detail/attend_rows.hpp>
#include <attend/mask.hpp>
#include <attend/module.hpp>
#include <attend/random.hpp>
#include <attend/state_dict.hpp>
#include <attend/tensor.hpp>
#include <attend/valid_lens.hpp>

namespace attend {

template <class Scalar>
class DotProductAttention : public Module {
 public:
  explicit DotProductAttention(Scalar dropout, Generator& generator = default_generator())
      : dropout_(dropout), generator_(generator.next()) {
    detail::require_probability(dropout, "DotProductAttention");
  }

  // queries (batch, q, d), keys (batch, k, d), values (batch, k, v) -> (batch, q, v)
  // mask: none; valid lengths (batch,) or (batch, q); or any Mask, keep tensor (batch or 1, q, k)
  Tensor3<Scalar> operator()(const Tensor3<Scalar>& queries, const Tensor3<Scalar>& keys, const Tensor3<Scalar>& values,
                             const Mask& mask = {}) {
    constexpr const char* where = "DotProductAttention";
    detail::require_same_dim(queries, keys, 0, where, "queries", "keys", "batch size");
    detail::require_same_dim(keys, values, 0, where, "keys", "values", "batch size");
    detail::require_same_dim(queries, keys, 2, where, "queries", "keys", "feature size");
    detail::require_same_dim(keys, values, 1, where, "keys", "values", "number of steps");
    detail::require(queries.dimension(2) >= 1, where, ": queries must have at least 1 feature, got shape ",
                    detail::shape_string(queries.dimensions()));
    const Index batch = queries.dimension(0), num_queries = queries.dimension(1), num_keys = keys.dimension(1);
    mask.require_shape(batch, num_queries, num_keys, where);

    Tensor3<Scalar> output(batch, num_queries, values.dimension(2));  // (batch, q, v)
    Tensor3<Scalar> weights;                                          // (batch, q, k)
    const bool drop = is_training() && dropout_ > Scalar(0);
    detail::scaled_dot_product_heads<Scalar>(detail::as_matrix(queries), detail::as_matrix(keys),
                                             detail::as_matrix(values), batch, num_queries, num_keys, 1, mask, weights,
                                             detail::as_matrix(output), dropout_, drop ? &generator_ : nullptr);
    attention_weights_ = std::move(weights);
    return output;
  }

  // (batch, q, k) of the last call, before dropout.
  const Tensor3<Scalar>& attention_weights() const { return attention_weights_; }
  Scalar dropout() const { return dropout_; }
  // The generator of the dropout masks; reseed it for a repeatable training-mode call.
  Generator& generator() { return generator_; }

  // Empty, as d2l's DotProductAttention's; load_state_dict accepts only an empty dict. See state_dict.hpp.
  StateDict<Scalar> state_dict() const {
    return detail::state_dict_of<Scalar>(*this, "DotProductAttention::state_dict");
  }
  void load_state_dict(const StateDict<Scalar>& dict) {
    detail::load_state_dict_into(*this, dict, "DotProductAttention::load_state_dict");
  }
  // No parameter to visit.
  template <class Visit>
  void visit_parameters(Visit&&) const {}

 private:
  Scalar dropout_;
  Generator generator_;
  Tensor3<Scalar> attention_weights_;  // (batch, q, k)
};

}  // namespace attend
