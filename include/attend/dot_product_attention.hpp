// attend/dot_product_attention.hpp — scaled dot-product attention, as d2l's DotProductAttention.
//
//   weights = masked_softmax(Q K^T / sqrt(d), mask)              (batch, queries, keys)
//   output  = dropout(weights) V                                  (batch, queries, value_dim)
// The mask is d2l's valid lengths or any attend::Mask (causal, a keep tensor, their AND); see mask.hpp.
// It has no parameters: state_dict() is empty, as d2l's.
//
// Two paths (attention_path.hpp): the direct one above, which keeps the weights, and a tiled online-softmax kernel
// that forms none, taken automatically in evaluation mode when the weights would not fit the cache budget;
// set_path() chooses explicitly. forward() is the const, reentrant evaluation-mode pass: any number of threads may
// call it at once on one module, as long as none modifies the module meanwhile.
#pragma once

#include <attend/attention_path.hpp>
#include <attend/detail/attend_rows.hpp>
#include <attend/detail/flash_attention.hpp>
#include <attend/mask.hpp>
#include <attend/module.hpp>
#include <attend/random.hpp>
#include <attend/state_dict.hpp>
#include <attend/tensor.hpp>
#include <attend/valid_lens.hpp>
#include <attend/workspace.hpp>

#include <stdexcept>

namespace attend {

template <class Scalar>
class DotProductAttention : public Module {
 public:
  explicit DotProductAttention(Scalar dropout, Generator& generator = default_generator())
      : dropout_(checked_dropout(dropout)), generator_(generator.next()) {}

  // queries (batch, q, d), keys (batch, k, d), values (batch, k, v) -> (batch, q, v)
  // mask: none; valid lengths (batch,) or (batch, q); or any Mask, keep tensor (batch or 1, q, k)
  Tensor3<Scalar> operator()(const Tensor3<Scalar>& queries, const Tensor3<Scalar>& keys, const Tensor3<Scalar>& values,
                             const Mask& mask = {}) {
    check(queries, keys, values, mask, "DotProductAttention");
    const bool drop = is_training() && dropout_ > Scalar(0);
    const bool tiled = takes_tiled(queries, keys, drop);
    Tensor3<Scalar> output = run(queries, keys, values, mask, workspace_, tiled ? nullptr : &attention_weights_,
                                 drop ? &generator_ : nullptr, tiled);
    if (tiled) attention_weights_ = Tensor3<Scalar>();  // the previous call's weights are not this call's
    last_call_tiled_ = tiled;
    return output;
  }

  // The evaluation-mode output, whatever is_training(): no dropout, no weights kept, nothing in the module changed.
  // Safe to call from many threads at once; same arguments and result as operator().
  Tensor3<Scalar> forward(const Tensor3<Scalar>& queries, const Tensor3<Scalar>& keys, const Tensor3<Scalar>& values,
                          const Mask& mask = {}) const {
    AttentionWorkspace<Scalar> workspace;
    return forward(queries, keys, values, mask, workspace);
  }
  // The same, with the caller's workspace (one per thread): repeated calls of one shape allocate only the output.
  Tensor3<Scalar> forward(const Tensor3<Scalar>& queries, const Tensor3<Scalar>& keys, const Tensor3<Scalar>& values,
                          const Mask& mask, AttentionWorkspace<Scalar>& workspace) const {
    check(queries, keys, values, mask, "DotProductAttention::forward");
    return run(queries, keys, values, mask, workspace, nullptr, nullptr, takes_tiled(queries, keys, false));
  }

  // Which implementation runs: automatic (default), direct or tiled; see attention_path.hpp.
  void set_path(AttentionPath path) { path_ = detail::checked_path(path, "DotProductAttention::set_path"); }
  AttentionPath path() const { return path_; }

  // (batch, q, k) of the last call, before dropout. Empty before the first call; throws std::logic_error after a call
  // that took the tiled path, which forms none.
  const Tensor3<Scalar>& attention_weights() const {
    if (last_call_tiled_)
      throw std::logic_error(
          "DotProductAttention::attention_weights: the last call took the tiled path, which forms no weights; "
          "set_path(AttentionPath::direct) keeps them");
    return attention_weights_;
  }
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
  // Checked before the generator is drawn from: a constructor that throws leaves the generator as it was.
  static Scalar checked_dropout(Scalar dropout) {
    detail::require_probability(dropout, "DotProductAttention");
    return dropout;
  }

  static void check(const Tensor3<Scalar>& queries, const Tensor3<Scalar>& keys, const Tensor3<Scalar>& values,
                    const Mask& mask, const char* where) {
    detail::require_same_dim(queries, keys, 0, where, "queries", "keys", "batch size");
    detail::require_same_dim(keys, values, 0, where, "keys", "values", "batch size");
    detail::require_same_dim(queries, keys, 2, where, "queries", "keys", "feature size");
    detail::require_same_dim(keys, values, 1, where, "keys", "values", "number of steps");
    detail::require(queries.dimension(2) >= 1, where, ": queries must have at least 1 feature, got shape ",
                    detail::shape_text(queries.dimensions()));
    mask.require_shape(queries.dimension(0), queries.dimension(1), keys.dimension(1), where);
  }

  bool takes_tiled(const Tensor3<Scalar>& queries, const Tensor3<Scalar>& keys, bool dropout_active) const {
    return detail::takes_tiled_path<Scalar>(path_, dropout_active,
                                            queries.dimension(0) * queries.dimension(1) * keys.dimension(1));
  }

  // The forward pass on checked arguments. weights: where the direct path keeps them, or null (the workspace's are
  // used); generator: dropout's, or null; tiled: the path.
  Tensor3<Scalar> run(const Tensor3<Scalar>& queries, const Tensor3<Scalar>& keys, const Tensor3<Scalar>& values,
                      const Mask& mask, AttentionWorkspace<Scalar>& ws, Tensor3<Scalar>* weights, Generator* generator,
                      bool tiled) const {
    const Index batch = queries.dimension(0), num_queries = queries.dimension(1), num_keys = keys.dimension(1);
    Tensor3<Scalar> output(batch, num_queries, values.dimension(2));  // (batch, q, v)
    if (tiled) {
      detail::flash_attention_heads<Scalar>(detail::as_matrix(queries), detail::as_matrix(keys),
                                            detail::as_matrix(values), batch, num_queries, num_keys, 1, mask,
                                            detail::as_matrix(output), ws.tiles);
    } else {
      detail::scaled_dot_product_heads<Scalar>(detail::as_matrix(queries), detail::as_matrix(keys),
                                               detail::as_matrix(values), batch, num_queries, num_keys, 1, mask,
                                               weights != nullptr ? *weights : ws.weights, detail::as_matrix(output),
                                               dropout_, generator);
    }
    return output;
  }

  Scalar dropout_;
  Generator generator_;
  AttentionPath path_ = AttentionPath::automatic;
  Tensor3<Scalar> attention_weights_;  // (batch, q, k)
  bool last_call_tiled_ = false;       // so attention_weights_ is empty, not the weights of the last call
  AttentionWorkspace<Scalar> workspace_;
};

}  // namespace attend
