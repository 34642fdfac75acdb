// attend/dot_product_attention.hpp — scaled dot-product attention, as d2l's DotProductAttention.
//
//   weights = masked_softmax(Q K^T / sqrt(d), mask)              (batch, queries, keys)
//   output  = dropout(weights) V                                  (batch, queries, value_dim)
// The mask is d2l's valid lengths or any attend::Mask (causal, a keep tensor, their AND); see mask.hpp.
// It has no parameters: state_dict() is empty, as d2l's.
//
// Two paths (attention_path.hpp): the direct one above, which keeps the weights, and a tiled online-softmax kernel
// that forms none, taken automatically when the weights would not fit the cache budget; set_path() chooses
// explicitly. Training: operator() records its inputs for backward(grad_output), which returns the gradients of
// queries, keys and values on the path the call took (detail/attention_backward.hpp); there are no parameters.
// forward() is the const, reentrant evaluation-mode pass: any number of threads may call it at once on one module,
// as long as none modifies the module meanwhile.
#pragma once

#include <attend/config.hpp>

#include <attend/attention_gradients.hpp>
#include <attend/attention_path.hpp>
#include <attend/detail/attention_backward.hpp>
#include <attend/detail/attend_rows.hpp>
#include <attend/detail/core/attention.hpp>
#include <attend/detail/heads.hpp>
#include <attend/detail/modules/attention_path_module.hpp>
#include <attend/mask.hpp>
#include <attend/module.hpp>
#include <attend/parameter.hpp>
#include <attend/random.hpp>
#include <attend/state_dict.hpp>
#include <attend/tensor.hpp>
#include <attend/valid_lens.hpp>
#include <attend/workspace.hpp>

#include <vector>

namespace attend {
inline namespace ATTEND_ABI {

template <class Scalar>
class DotProductAttention : public detail::AttentionPathModule<DotProductAttention<Scalar>, Scalar> {
  using Base = detail::AttentionPathModule<DotProductAttention<Scalar>, Scalar>;
  friend Base;

 public:
  explicit DotProductAttention(Scalar dropout, Generator& generator = default_generator())
      : dropout_(checked_dropout(dropout)), generator_(generator.next()) {}

  // operator()(queries, keys, values, mask = {}):
  //   queries (batch, q, d), keys (batch, k, d), values (batch, k, v) -> (batch, q, v)
  //   mask: none; valid lengths (batch,) or (batch, q); or any Mask, keep tensor (batch or 1, q, k)
  using Base::operator();

  // forward(queries, keys, values, mask = {}) const: the evaluation-mode output, whatever is_training(): no dropout,
  // no weights kept, nothing in the module changed. Safe to call from many threads at once; same arguments and
  // result as operator().
  // forward(queries, keys, values, mask, AttentionWorkspace<Scalar>& workspace) const: the same, with the caller's
  // workspace (one per thread): repeated calls of one shape allocate only the output.
  // forward(queries, keys, values, mask, workspace, out) const: the same into out, a Tensor3 of the output's shape or
  // a TensorMap3 of the caller's memory: repeated calls of one shape allocate nothing.
  // Every tensor argument is a Tensor3 or a map of one (TensorMap3, ConstTensorMap3), read in place; one tensor (or
  // maps of the same memory) as queries, keys and values is self-attention.
  using Base::forward;

  // set_path(AttentionPath), path(): which implementation runs: automatic (default), direct or tiled; see
  // attention_path.hpp. set_path throws std::invalid_argument on a value outside the enum.
  using Base::path;
  using Base::set_path;

  // backward(grad_output): grad_output (batch, q, v), the gradient of the last operator() call's output ->
  // AttentionGradients {queries (batch, q, d), keys (batch, k, d), values (batch, k, v)}, on the path that call took,
  // with the dropout mask it drew. Throws std::logic_error when no call was recorded, std::invalid_argument for a
  // grad_output of another shape.
  using Base::backward;

  // No parameter: nothing to zero, an empty list.
  void zero_grad() {}
  std::vector<Parameter<Scalar>> parameters() { return {}; }

  // attention_weights(): (batch, q, k) of the last call, before dropout. Empty before the first call; throws
  // std::logic_error after a call that took the tiled path, which forms none.
  using Base::attention_weights;

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
  // The names in its messages.
  static constexpr const char* name = "DotProductAttention";
  static constexpr const char* forward_name = "DotProductAttention::forward";

  // Checked before the generator is drawn from: a constructor that throws leaves the generator as it was.
  static Scalar checked_dropout(Scalar dropout) {
    detail::require_probability(dropout, "DotProductAttention");
    return dropout;
  }

  static void check(const ConstTensorMap3<Scalar>& queries, const ConstTensorMap3<Scalar>& keys,
                    const ConstTensorMap3<Scalar>& values, const Mask& mask, const char* where) {
    detail::require_same_dim(queries, keys, 0, where, "queries", "keys", "batch size");
    detail::require_same_dim(keys, values, 0, where, "keys", "values", "batch size");
    detail::require_same_dim(queries, keys, 2, where, "queries", "keys", "feature size");
    detail::require_same_dim(keys, values, 1, where, "keys", "values", "number of steps");
    detail::require(queries.dimension(2) >= 1, where, ": queries must have at least 1 feature, got shape ",
                    detail::shape_text(queries.dimensions()));
    mask.require_shape(queries.dimension(0), queries.dimension(1), keys.dimension(1), where);
  }

  // The elements of the (batch, q, k) weights the direct path forms.
  static Index weights_count(const ConstTensorMap3<Scalar>& queries, const ConstTensorMap3<Scalar>& keys) {
    return queries.dimension(0) * queries.dimension(1) * keys.dimension(1);
  }

  template <class Values>
  Index output_features(const Values& values) const {
    return values.dimension(2);
  }
  void check_backward(const char*) const {}  // no parameter to check

  // The forward pass on checked arguments, into output (batch, q, v). weights: where the direct path keeps them, or
  // null (the workspace's are used); tiled: the path; record: where to keep the output and the tiled path's
  // log-sum-exp, or null.
  void run(const ConstTensorMap3<Scalar>& queries, const ConstTensorMap3<Scalar>& keys,
           const ConstTensorMap3<Scalar>& values, const Mask& mask, AttentionWorkspace<Scalar>& ws,
           Tensor3<Scalar>* weights, const detail::AttentionDropout& dropout, bool tiled,
           detail::AttentionRecord<Scalar>* record, const TensorMap3<Scalar>& output) const {
    const Index batch = queries.dimension(0), num_queries = queries.dimension(1), num_keys = keys.dimension(1);
    // One head per batch row: (batch, steps) steps of one head of features.
    const auto Q = detail::heads_of(detail::as_matrix(queries), batch, num_queries, 1);
    const auto K = detail::heads_of(detail::as_matrix(keys), batch, num_keys, 1);
    const auto V = detail::heads_of(detail::as_matrix(values), batch, num_keys, 1);
    const auto out = detail::heads_of(detail::as_matrix(output), batch, num_queries, 1);
    if (tiled) {
      Scalar* lse = nullptr;
      if (record != nullptr) {
        record->lse.resize(batch, num_queries, 1);  // (batch, q, 1 head)
        lse = record->lse.data();
      }
      detail::core::forward(detail::core::scaled_call<Scalar>(Q, K, V, mask, dropout), out, lse, ws.core);
      if (record != nullptr) record->heads = detail::as_matrix(output);
    } else {
      detail::scaled_dot_product_heads<Scalar>(Q, K, V, mask, weights != nullptr ? *weights : ws.weights, out,
                                               dropout, &ws.direct);
    }
  }

  AttentionGradients<Scalar> backward_pass(const detail::AttentionRecord<Scalar>& r, const Tensor3<Scalar>* weights,
                                           const ConstTensorMap3<Scalar>& grad_output,
                                           detail::HeadsBackwardBuffers<Scalar>& buffers) const {
    const Tensor3<Scalar>&queries = r.queries, &keys = r.keys_in(), &values = r.values_in();
    const Index batch = queries.dimension(0), num_queries = queries.dimension(1), num_keys = keys.dimension(1);
    AttentionGradients<Scalar> g{Tensor3<Scalar>(queries.dimensions()), Tensor3<Scalar>(keys.dimensions()),
                                 Tensor3<Scalar>(values.dimensions())};
    // One head per batch row, read-only for a const tensor.
    const auto heads = [&](auto& X, Index length) { return detail::heads_of(detail::as_matrix(X), batch, length, 1); };
    const Matrix<Scalar>& O = r.heads;  // tiled only: (batch * q, v)
    detail::attention_heads_backward<Scalar>(
        heads(queries, num_queries), heads(keys, num_keys), heads(values, num_keys), r.mask, r.dropout, weights,
        detail::heads_of(O, batch, num_queries, 1), r.lse, heads(grad_output, num_queries),
        heads(g.queries, num_queries), heads(g.keys, num_keys), heads(g.values, num_keys), buffers);
    return g;
  }

  Scalar dropout_;
  Generator generator_;
};

}  // namespace ATTEND_ABI
}  // namespace attend
