// attend/rms_norm.hpp — root-mean-square normalization over the last axis (Llama's RMSNorm; torch.nn.RMSNorm).
//
//   y = x / sqrt(mean(x^2) + eps) * weight       per (batch, step) row
//
// weight (dim) starts at 1. Computed in Scalar throughout: transformers' LlamaRMSNorm computes in float32 whatever
// its model's type, so a float64 model of transformers differs from this (and from torch.nn.RMSNorm) by about 1e-7.
// operator() keeps its input and each row's 1 / sqrt(mean(x^2) + eps) for backward(); forward() const keeps
// nothing. The arithmetic: detail/normalization.hpp.
#pragma once

#include <attend/config.hpp>

#include <attend/detail/modules/norm_module.hpp>

namespace attend {
inline namespace ATTEND_ABI {

template <class Scalar>
class RMSNorm : public detail::NormModule<RMSNorm<Scalar>, Scalar, detail::NormKind::rms> {
  using Base = detail::NormModule<RMSNorm<Scalar>, Scalar, detail::NormKind::rms>;

 public:
  static constexpr const char* module_name = "RMSNorm";

  explicit RMSNorm(Index dim, Scalar eps = Scalar(1e-6)) : Base(dim, eps) {}

  // weight(), weight_grad(), operator(), forward(), backward(), parameters(), state_dict(), ...: NormModule.
};

}  // namespace ATTEND_ABI
}  // namespace attend
