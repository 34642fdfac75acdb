// attend/layer_norm.hpp — layer normalization over the last axis, as torch.nn.LayerNorm(normalized_shape, eps).
//
//   y = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias       var biased (divided by n), per (batch, step) row
//
// weight and bias (normalized_shape) start at 1 and 0, PyTorch's names and initialisation. operator() keeps its
// input and each row's mean and 1 / sqrt(var + eps) for backward(), which returns dX and adds dweight and dbias into
// weight_grad() and bias_grad(); forward() const keeps nothing. The arithmetic: detail/normalization.hpp.
#pragma once

#include <attend/config.hpp>

#include <attend/detail/modules/norm_module.hpp>

namespace attend {
inline namespace ATTEND_ABI {

template <class Scalar>
class LayerNorm : public detail::NormModule<LayerNorm<Scalar>, Scalar, detail::NormKind::layer> {
  using Base = detail::NormModule<LayerNorm<Scalar>, Scalar, detail::NormKind::layer>;

 public:
  static constexpr const char* module_name = "LayerNorm";

  explicit LayerNorm(Index normalized_shape, Scalar eps = Scalar(1e-5)) : Base(normalized_shape, eps) {}

  Vector<Scalar>& bias() { return this->bias_vector(); }  // (normalized_shape)
  const Vector<Scalar>& bias() const { return this->bias_vector(); }
  Vector<Scalar>& bias_grad() { return this->bias_grad_vector(); }  // (normalized_shape)
  const Vector<Scalar>& bias_grad() const { return this->bias_grad_vector(); }

  // weight(), weight_grad(), operator(), forward(), backward(), parameters(), state_dict(), ...: NormModule.
};

}  // namespace ATTEND_ABI
}  // namespace attend
