// attend/detail/attention_path_module.hpp — what every module with two attention paths does around its forward pass.
//
// DotProductAttention and MultiHeadAttention inherit it (CRTP) and re-export its public members. It holds the path
// setting, the weights of the last call, whether that call was tiled, and the workspace operator() reuses, and it
// runs the calls: check the arguments, choose the path (attention_path.hpp), run the derived class's forward pass,
// keep or drop the weights. Nothing is changed before the arguments are checked, so a call that throws at the door
// leaves the module as it was.
//
// Derived provides (this class is its friend):
//   static constexpr const char* name           "DotProductAttention": the prefix of its messages
//   static constexpr const char* forward_name   "DotProductAttention::forward"
//   void check(queries, keys, values, mask, const char* where) const        throws std::invalid_argument
//   Index weights_count(queries, keys) const     the elements of the (batch * heads, q, k) weights
//   Tensor3<Scalar> run(queries, keys, values, mask, AttentionWorkspace&, Tensor3* weights, Generator* generator,
//                       bool tiled) const       the forward pass on checked arguments (weights: where the direct
//                                               path keeps them, or null; generator: dropout's, or null)
// and the public dropout() and generator().
#pragma once

#include <attend/config.hpp>

#include <attend/attention_path.hpp>
#include <attend/mask.hpp>
#include <attend/module.hpp>
#include <attend/random.hpp>
#include <attend/tensor.hpp>
#include <attend/workspace.hpp>

#include <stdexcept>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

template <class Derived, class Scalar>
class AttentionPathModule : public Module {
 public:
  Tensor3<Scalar> operator()(const Tensor3<Scalar>& queries, const Tensor3<Scalar>& keys, const Tensor3<Scalar>& values,
                             const Mask& mask = {}) {
    derived().check(queries, keys, values, mask, Derived::name);
    const bool drop = is_training() && derived().dropout() > Scalar(0);
    const bool tiled = takes_tiled(queries, keys, drop);
    Tensor3<Scalar> output = derived().run(queries, keys, values, mask, workspace_,
                                           tiled ? nullptr : &attention_weights_,
                                           drop ? &derived().generator() : nullptr, tiled);
    if (tiled) attention_weights_ = Tensor3<Scalar>();  // the previous call's weights are not this call's
    last_call_tiled_ = tiled;
    return output;
  }

  Tensor3<Scalar> forward(const Tensor3<Scalar>& queries, const Tensor3<Scalar>& keys, const Tensor3<Scalar>& values,
                          const Mask& mask = {}) const {
    AttentionWorkspace<Scalar> workspace;
    return forward(queries, keys, values, mask, workspace);
  }
  Tensor3<Scalar> forward(const Tensor3<Scalar>& queries, const Tensor3<Scalar>& keys, const Tensor3<Scalar>& values,
                          const Mask& mask, AttentionWorkspace<Scalar>& workspace) const {
    derived().check(queries, keys, values, mask, Derived::forward_name);
    return derived().run(queries, keys, values, mask, workspace, nullptr, nullptr, takes_tiled(queries, keys, false));
  }

  void set_path(AttentionPath path) { path_ = checked_path(path, Derived::name); }
  AttentionPath path() const { return path_; }
  // True when the last operator() took the tiled path (and so kept no attention weights).
  bool last_call_tiled() const { return last_call_tiled_; }

  const Tensor3<Scalar>& attention_weights() const {
    if (last_call_tiled_)
      throw std::logic_error(message(Derived::name,
                                     "::attention_weights: the last call took the tiled path, which forms no weights; "
                                     "set_path(AttentionPath::direct) keeps them"));
    return attention_weights_;
  }

 protected:
  AttentionPathModule() = default;

 private:
  const Derived& derived() const { return static_cast<const Derived&>(*this); }
  Derived& derived() { return static_cast<Derived&>(*this); }

  bool takes_tiled(const Tensor3<Scalar>& queries, const Tensor3<Scalar>& keys, bool dropout_active) const {
    return takes_tiled_path<Scalar>(path_, dropout_active, derived().weights_count(queries, keys));
  }

  AttentionPath path_ = AttentionPath::automatic;
  Tensor3<Scalar> attention_weights_;  // (batch * heads, q, k)
  bool last_call_tiled_ = false;       // so attention_weights_ is empty, not the weights of the last call
  AttentionWorkspace<Scalar> workspace_;
};

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
