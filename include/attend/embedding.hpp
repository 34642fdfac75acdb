// attend/embedding.hpp — a lookup table of token vectors, as torch.nn.Embedding(num_embeddings, embedding_dim).
//
//   Y[b, t, :] = weight[tokens(b, t), :]          weight: (num_embeddings, embedding_dim)
//
// Initialised N(0, 1) as PyTorch does (from attend's Generator: the same distribution, not the same numbers).
// operator() keeps the tokens for backward(dY), which adds dY[b, t, :] into weight_grad()'s row tokens(b, t) (rows
// of repeated tokens add up); tokens have no gradient. forward() const keeps nothing. state_dict(): "weight".
//
// Embedding<bfloat16> stores its table in bfloat16 and runs in evaluation only: a lookup copies rows as stored,
// operator() keeps nothing, backward() does not compile, and weight_grad() is empty. Drawn from a generator, its table
// is an Embedding<float>'s from the same generator, rounded.
#pragma once

#include <attend/config.hpp>

#include <attend/detail/views.hpp>
#include <attend/module.hpp>
#include <attend/parameter.hpp>
#include <attend/random.hpp>
#include <attend/tensor.hpp>
#include <string>
#include <vector>

namespace attend {
inline namespace ATTEND_ABI {

template <class Scalar>
class Embedding : public Module, public detail::WithParameters<Embedding<Scalar>, Scalar> {
 public:
  Embedding(Index num_embeddings, Index embedding_dim, Generator& generator = default_generator())
      : num_embeddings_(checked(num_embeddings, "num_embeddings")),
        embedding_dim_(checked(embedding_dim, "embedding_dim")),
        weight_(num_embeddings, embedding_dim),
        weight_grad_(Matrix<Scalar>::Zero(detail::gradient_size<Scalar>(num_embeddings),
                                          detail::gradient_size<Scalar>(embedding_dim))) {
    using Drawn = detail::compute_type<Scalar>;  // bfloat16's values are float's draws, rounded
    for (Index i = 0; i < weight_.size(); ++i) weight_.data()[i] = Scalar(generator.normal<Drawn>());
  }

  Matrix<Scalar>& weight() { return weight_; }  // (num_embeddings, embedding_dim)
  const Matrix<Scalar>& weight() const { return weight_; }
  Matrix<Scalar>& weight_grad() { return weight_grad_; }  // (num_embeddings, embedding_dim)
  const Matrix<Scalar>& weight_grad() const { return weight_grad_; }
  Index num_embeddings() const { return num_embeddings_; }
  Index embedding_dim() const { return embedding_dim_; }

  // tokens (batch, steps), each in [0, num_embeddings) -> (batch, steps, embedding_dim); keeps the tokens.
  Tensor3<Scalar> operator()(const Matrix<Index>& tokens) {
    if constexpr (detail::is_reduced<Scalar>) return forward(tokens);  // evaluation only: nothing to keep
    Tensor3<Scalar> Y = forward(tokens);  // throws before anything is kept
    recorded_tokens_ = tokens;
    recorded_ = true;
    return Y;
  }

  // The same, keeping nothing.
  Tensor3<Scalar> forward(const Matrix<Index>& tokens) const {
    Tensor3<Scalar> Y(tokens.rows(), tokens.cols(), embedding_dim_);  // (batch, steps, embedding_dim)
    forward(tokens, Y);
    return Y;
  }
  // The same into out (batch, steps, embedding_dim), a Tensor3 or a TensorMap3 of the caller's memory.
  template <class Out>
  void forward(const Matrix<Index>& tokens, Out&& out_arg) const {
    constexpr const char* where = "Embedding::forward";
    const TensorMap3<Scalar> out = detail::output3<Scalar>(out_arg);
    check_tokens(tokens, where);
    detail::require_shape(out, {tokens.rows(), tokens.cols(), embedding_dim_}, where, "out",
                          "(batch, steps, embedding_dim)");
    auto Y = detail::as_matrix(out);  // (batch * steps, embedding_dim)
    for (Index b = 0; b < tokens.rows(); ++b)
      for (Index t = 0; t < tokens.cols(); ++t) Y.row(b * tokens.cols() + t) = weight_.row(tokens(b, t));
  }

  // dY (batch, steps, embedding_dim), the gradient of the last operator() call's output: adds into weight_grad().
  // Throws std::logic_error when no call was recorded, std::invalid_argument for another shape.
  template <class GradOutput>
  void backward(const GradOutput& grad_output) {
    static_assert(!detail::is_reduced<Scalar>, "attend: Embedding<bfloat16> runs in evaluation only; train in float");
    if constexpr (!detail::is_reduced<Scalar>) {  // the body of float and double only
      constexpr const char* where = "Embedding::backward";
      const ConstTensorMap3<Scalar> dY = detail::input3<Scalar>(grad_output);
      detail::require_recorded(recorded_, where, "Embedding");
      this->require_gradients(where);
      const Matrix<Index>& tokens = recorded_tokens_;  // (batch, steps)
      detail::require_shape(dY, {tokens.rows(), tokens.cols(), embedding_dim_}, where, "grad_output",
                            "(batch, steps, embedding_dim)");
      const auto dY_rows = detail::as_matrix(dY);  // (batch * steps, embedding_dim)
      for (Index b = 0; b < tokens.rows(); ++b)
        for (Index t = 0; t < tokens.cols(); ++t) weight_grad_.row(tokens(b, t)) += dY_rows.row(b * tokens.cols() + t);
    }
  }

  // Throws std::invalid_argument naming the first token outside [0, num_embeddings), or a resized weight.
  void check_tokens(const Matrix<Index>& tokens, const char* where) const {
    this->require_gradients(where);
    for (Index b = 0; b < tokens.rows(); ++b)
      for (Index t = 0; t < tokens.cols(); ++t)
        detail::require(tokens(b, t) >= 0 && tokens(b, t) < num_embeddings_, where, ": tokens(", b, ", ", t,
                        ") must be in [0, ", num_embeddings_, ") (num_embeddings), got ", tokens(b, t));
  }

 private:
  friend class detail::WithParameters<Embedding<Scalar>, Scalar>;
  static constexpr const char* module_name = "Embedding";

  template <class Self, class Visit>
  static void visit_with_gradients_of(Self& self, Visit& visit) {
    visit("weight", self.weight_, self.weight_grad_, std::vector<Index>{self.num_embeddings_, self.embedding_dim_});
  }

  static Index checked(Index size, const char* name) {
    detail::require_at_least(size, 1, "Embedding", name);
    return size;
  }

  Index num_embeddings_;
  Index embedding_dim_;
  Matrix<Scalar> weight_;          // (num_embeddings, embedding_dim)
  Matrix<Scalar> weight_grad_;     // (num_embeddings, embedding_dim)
  Matrix<Index> recorded_tokens_;  // (batch, steps): the last operator() call's tokens
  bool recorded_ = false;
};

}  // namespace ATTEND_ABI
}  // namespace attend
