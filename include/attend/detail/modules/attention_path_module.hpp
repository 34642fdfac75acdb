// attend/detail/modules/attention_path_module.hpp — what every module with two attention paths does around its
// forward pass.
//
// DotProductAttention and MultiHeadAttention inherit it (CRTP) and re-export its public members. It holds the path
// setting, the weights of the last call, whether that call was tiled, the workspace operator() reuses and the record
// of the last operator() call for backward(), and it runs the calls: check the arguments, choose the path
// (attention_path.hpp), draw the call's dropout seed, run the derived class's forward pass, keep or drop the
// weights, record; and backward(): check, then the derived class's backward pass on the record. Nothing is changed
// before the arguments are checked, so a call that throws at the door leaves the module as it was. Of bfloat16
// (evaluation only), operator() runs the tiled path and records nothing, and backward() does not compile.
//
// Derived provides (this class is its friend):
//   static constexpr const char* name           "DotProductAttention": the prefix of its messages
//   static constexpr const char* forward_name   "DotProductAttention::forward"
// (every tensor argument a ConstTensorMap3 of the call's argument, the output a TensorMap3 of its shape)
//   void check(queries, keys, values, mask, const char* where) const        throws std::invalid_argument
//   Index weights_count(queries, keys) const     the elements of the (batch * heads, q, k) weights
//   void run(queries, keys, values, mask, AttentionWorkspace&, Tensor3* weights, const AttentionDropout&,
//            bool tiled, AttentionRecord* record, TensorMap3 output) const
//                                               the forward pass on checked arguments, into output (weights: where
//                                               the direct path keeps them, or null; record: where to keep what its
//                                               backward pass needs beyond the inputs, or null)
//   Index output_features(values) const          the last axis of the output
//   void check_backward(const char* where) const  throws unless parameters and gradients keep their shapes
//   AttentionGradients<Scalar> backward_pass(const AttentionRecord&, const Tensor3<Scalar>* weights,
//                                            grad_output, HeadsBackwardBuffers<Scalar>&)
//                                               adds the parameters' gradients; the buffers: the heads' backward
//                                               pass's scratch, kept here between calls
// and the public dropout() and generator().
#pragma once

#include <attend/config.hpp>

#include <attend/attention_gradients.hpp>
#include <attend/attention_path.hpp>
#include <attend/detail/attention_backward.hpp>
#include <attend/detail/attention_dropout.hpp>
#include <attend/detail/views.hpp>
#include <attend/mask.hpp>
#include <attend/module.hpp>
#include <attend/random.hpp>
#include <attend/tensor.hpp>
#include <attend/workspace.hpp>

#include <stdexcept>
#include <string>

namespace attend {
inline namespace ATTEND_ABI {
namespace detail {

// What an operator() call keeps for backward(): its inputs, mask and dropout seed, its path, and what its forward
// pass made that the backward pass reads again.
template <class Scalar>
struct AttentionRecord {
  Tensor3<Scalar> queries, keys, values;  // copies of the call's inputs; keys and values empty when self
  bool self = false;                      // one tensor was passed as queries, keys and values
  Mask mask;
  AttentionDropout dropout;
  bool tiled = false;
  Matrix<Scalar> Q, K, V;  // MultiHeadAttention's projections: (batch * q, hiddens), (batch * k, hiddens) twice
  Matrix<Scalar> heads;    // the heads' output before any projection: (batch * q, heads * dv)
  Tensor3<Scalar> lse;     // the tiled path's log-sum-exp of each row's scaled scores: (batch, q, heads)

  const Tensor3<Scalar>& keys_in() const { return self ? queries : keys; }
  const Tensor3<Scalar>& values_in() const { return self ? queries : values; }
};

// True when two arguments are one tensor: the same memory, the same shape.
template <class Scalar>
bool same_memory(const ConstTensorMap3<Scalar>& a, const ConstTensorMap3<Scalar>& b) {
  return a.data() == b.data() && a.dimensions() == b.dimensions();
}

template <class Derived, class Scalar>
class AttentionPathModule : public Module {
 public:
  // Each tensor argument is a Tensor3 or a map of one (TensorMap3, ConstTensorMap3), read in place; anything else
  // stops the compilation (detail/views.hpp). Passing one tensor, or maps of the same memory and shape, as queries,
  // keys and values is self-attention: the inputs are read once.
  template <class Queries, class Keys, class Values>
  Tensor3<Scalar> operator()(const Queries& queries, const Keys& keys, const Values& values, const Mask& mask = {}) {
    return call(input3<Scalar>(queries), input3<Scalar>(keys), input3<Scalar>(values), mask);
  }

  // grad_output: (batch, q, output features), the gradient of the last operator() call's output -> the gradients of
  // its queries, keys and values; adds the parameters' gradients. Throws std::logic_error when no call was recorded,
  // std::invalid_argument when grad_output has another shape or a parameter or gradient was resized; a call that
  // throws changes nothing.
  template <class GradOutput>
  AttentionGradients<Scalar> backward(const GradOutput& grad_output_in) {
    static_assert(!is_reduced<Scalar>, "attend: attention modules of bfloat16 run in evaluation only; train in float");
    if constexpr (!is_reduced<Scalar>) {  // the body of float and double only
      const ConstTensorMap3<Scalar> grad_output = input3<Scalar>(grad_output_in);
      const std::string where = message(Derived::name, "::backward");
      require_recorded(recorded_, where.c_str(), Derived::name);
      derived().check_backward(where.c_str());
      const Tensor3<Scalar>& queries = record_.queries;
      require_shape(grad_output,
                    {queries.dimension(0), queries.dimension(1), derived().output_features(record_.values_in())},
                    where.c_str(), "grad_output", "(batch, queries, output features)");
      return derived().backward_pass(record_, record_.tiled ? nullptr : &attention_weights_, grad_output,
                                     heads_backward_);
    } else {
      return {};  // not reached: the assertion stops the build
    }
  }

  template <class Queries, class Keys, class Values>
  Tensor3<Scalar> forward(const Queries& queries, const Keys& keys, const Values& values, const Mask& mask = {}) const {
    AttentionWorkspace<Scalar> workspace;
    return forward(queries, keys, values, mask, workspace);
  }
  template <class Queries, class Keys, class Values>
  Tensor3<Scalar> forward(const Queries& queries, const Keys& keys, const Values& values, const Mask& mask,
                          AttentionWorkspace<Scalar>& workspace) const {
    const auto q = input3<Scalar>(queries), v = input3<Scalar>(values);
    Tensor3<Scalar> output(q.dimension(0), q.dimension(1), derived().output_features(v));  // (batch, q, features)
    forward(q, input3<Scalar>(keys), v, mask, workspace, output);
    return output;
  }
  // The same into out (batch, q, output features): a Tensor3 of that shape or a TensorMap3 of the caller's memory.
  // With a workspace kept between calls, a repeated call of one shape allocates nothing.
  template <class Queries, class Keys, class Values, class Out>
  void forward(const Queries& queries_in, const Keys& keys_in, const Values& values_in, const Mask& mask,
               AttentionWorkspace<Scalar>& workspace, Out&& out_arg) const {
    const auto queries = input3<Scalar>(queries_in), keys = input3<Scalar>(keys_in), values = input3<Scalar>(values_in);
    const TensorMap3<Scalar> out = output3<Scalar>(out_arg);
    derived().check(queries, keys, values, mask, Derived::forward_name);
    require_out<Scalar>(out, {queries.dimension(0), queries.dimension(1), derived().output_features(values)},
                        Derived::forward_name, "(batch, queries, output features)",
                        {{&queries, "queries"}, {&keys, "keys"}, {&values, "values"}});
    derived().run(queries, keys, values, mask, workspace, nullptr, AttentionDropout(), takes_tiled(queries, keys),
                  nullptr, out);
  }

  // bfloat16 takes the tiled path only: the direct one keeps the weights, of the training and float arithmetic.
  void set_path(AttentionPath path) {
    const AttentionPath checked = checked_path(path, Derived::name);
    require(!is_reduced<Scalar> || checked != AttentionPath::direct, Derived::name,
            "::set_path: bfloat16 takes the tiled path only, got AttentionPath::direct");
    path_ = checked;
  }
  AttentionPath path() const { return path_; }
  // True when the last operator() took the tiled path (and so kept no attention weights).
  bool last_call_tiled() const { return last_call_tiled_; }

  const Tensor3<Scalar>& attention_weights() const {
    if constexpr (is_reduced<Scalar>)
      throw std::logic_error(
          message(Derived::name, "::attention_weights: bfloat16 runs the tiled path only, which forms no weights"));
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

  bool takes_tiled(const ConstTensorMap3<Scalar>& queries, const ConstTensorMap3<Scalar>& keys) const {
    return is_reduced<Scalar> || takes_tiled_path<Scalar>(path_, derived().weights_count(queries, keys));
  }

  // operator() on maps of its arguments.
  Tensor3<Scalar> call(const ConstTensorMap3<Scalar>& queries, const ConstTensorMap3<Scalar>& keys,
                       const ConstTensorMap3<Scalar>& values, const Mask& mask) {
    derived().check(queries, keys, values, mask, Derived::name);
    if constexpr (is_reduced<Scalar>) {  // evaluation only: nothing to keep, nothing dropped
      Tensor3<Scalar> output(queries.dimension(0), queries.dimension(1), derived().output_features(values));
      derived().run(queries, keys, values, mask, workspace_, nullptr, AttentionDropout(), true, nullptr,
                    output3<Scalar>(output));
      last_call_tiled_ = true;
      return output;
    }
    const bool drop = is_training() && derived().dropout() > Scalar(0);
    const bool tiled = takes_tiled(queries, keys);
    recorded_ = false;  // until this call's record is complete
    const AttentionDropout dropout =
        drop ? AttentionDropout(static_cast<double>(derived().dropout()), derived().generator().next())
             : AttentionDropout();
    Tensor3<Scalar> output(queries.dimension(0), queries.dimension(1), derived().output_features(values));
    derived().run(queries, keys, values, mask, workspace_, tiled ? nullptr : &attention_weights_, dropout, tiled,
                  &record_, output3<Scalar>(output));
    if (tiled) attention_weights_ = Tensor3<Scalar>();  // the previous call's weights are not this call's
    last_call_tiled_ = tiled;
    record_.self = same_memory(queries, keys) && same_memory(keys, values);
    // Assigned into the storage of the last call's record, kept when the shape is the same: no allocation.
    record_.queries = queries;
    if (record_.self) {
      record_.keys = Tensor3<Scalar>();
      record_.values = Tensor3<Scalar>();
    } else {
      record_.keys = keys;
      record_.values = values;
    }
    record_.mask = mask;
    record_.dropout = dropout;
    record_.tiled = tiled;
    recorded_ = true;
    return output;
  }

  AttentionPath path_ = AttentionPath::automatic;
  Tensor3<Scalar> attention_weights_;  // (batch * heads, q, k)
  bool last_call_tiled_ = false;       // so attention_weights_ is empty, not the weights of the last call
  AttentionWorkspace<Scalar> workspace_;
  AttentionRecord<Scalar> record_;  // of the last operator() call
  bool recorded_ = false;
  HeadsBackwardBuffers<Scalar> heads_backward_;  // scratch of backward(), reused by the next call
};

}  // namespace detail
}  // namespace ATTEND_ABI
}  // namespace attend
