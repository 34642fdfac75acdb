// attend/loss.hpp — losses: the value, and its gradient with respect to the prediction.
//
//   mse_loss(prediction, target)             F.mse_loss(prediction, target) (reduction 'mean'): the mean of
//                                            (prediction - target)^2 over every element; grad 2 (p - t) / elements
//   cross_entropy(logits, labels, lens)      d2l's MaskedSoftmaxCELoss, then the mean over the batch rows:
//                                            logits (batch, steps, classes), labels (batch, steps) in [0, classes);
//                                            token (b, t) weighs 1 when t < lens(b) (every token without lens) and 0
//                                            otherwise; row b's loss is the mean over all its steps of
//                                            weight * (logsumexp_c logits(b, t, c) - logits(b, t, label)), the value
//                                            the mean of the rows' losses; grad (softmax(logits) - one_hot(label))
//                                            * weight / (batch * steps)
#pragma once

#include <attend/config.hpp>

#include <attend/detail/views.hpp>
#include <attend/tensor.hpp>
#include <attend/valid_lens.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

namespace attend {
inline namespace ATTEND_ABI {

template <class Scalar>
struct Loss {
  Scalar value;
  Tensor3<Scalar> grad;  // d value / d prediction, the prediction's shape
};

// prediction, target: the same shape, at least one element; each a Tensor3 or a map of one (TensorMap3,
// ConstTensorMap3), read in place, as the logits below.
template <class Prediction, class Target, class Scalar = detail::argument_scalar<Prediction>>
Loss<Scalar> mse_loss(const Prediction& prediction_in, const Target& target_in) {
  constexpr const char* where = "mse_loss";
  const ConstTensorMap3<Scalar> prediction = detail::input3<Scalar>(prediction_in),
                                target = detail::input3<Scalar>(target_in);
  const auto& d = prediction.dimensions();
  detail::require_shape(target, {d[0], d[1], d[2]}, where, "target", "(prediction's shape)");
  detail::require(prediction.size() > 0, where, ": prediction must have at least one element, got shape ",
                  detail::shape_text(prediction.dimensions()));
  const Index n = prediction.size();
  Loss<Scalar> loss{Scalar(0), Tensor3<Scalar>(prediction.dimensions())};
  Scalar sum = Scalar(0);
  for (Index i = 0; i < n; ++i) {
    const Scalar difference = prediction.data()[i] - target.data()[i];
    sum += difference * difference;
    loss.grad.data()[i] = Scalar(2) * difference / static_cast<Scalar>(n);
  }
  loss.value = sum / static_cast<Scalar>(n);
  return loss;
}

// logits: (batch, steps, classes), classes >= 1; labels: (batch, steps), each in [0, classes); valid_lens: none or
// (batch,). A batch or steps of 0 gives NaN, as PyTorch's mean over nothing.
template <class Logits, class Scalar = detail::argument_scalar<Logits>>
Loss<Scalar> cross_entropy(const Logits& logits_in, const Matrix<Index>& labels, const ValidLens& valid_lens = {}) {
  constexpr const char* where = "cross_entropy";
  const ConstTensorMap3<Scalar> logits = detail::input3<Scalar>(logits_in);
  const Index batch = logits.dimension(0), steps = logits.dimension(1), classes = logits.dimension(2);
  detail::require(classes >= 1, where, ": logits must have at least one class (axis 2), got shape ",
                  detail::shape_text(logits.dimensions()));
  detail::require(labels.rows() == batch && labels.cols() == steps, where, ": labels must have shape (", batch, ", ",
                  steps, ") (logits' batch, steps), got (", labels.rows(), ", ", labels.cols(), ")");
  detail::require(valid_lens.kind() != ValidLens::Kind::per_query, where,
                  ": valid_lens must be one length per batch row, (batch,), got one per step");
  valid_lens.require_shape(batch, steps, where);
  for (Index b = 0; b < batch; ++b)
    for (Index t = 0; t < steps; ++t)
      detail::require(labels(b, t) >= 0 && labels(b, t) < classes, where, ": labels(", b, ", ", t,
                      ") must be in [0, ", classes, "), got ", labels(b, t));

  Loss<Scalar> loss{Scalar(0), Tensor3<Scalar>(batch, steps, classes)};  // grad: (batch, steps, classes)
  loss.grad.setZero();
  const Scalar scale = Scalar(1) / static_cast<Scalar>(batch * steps);  // the two means; inf when there is no token
  Scalar total = Scalar(0);
  for (Index b = 0; b < batch; ++b) {
    const Index length = valid_lens.empty() ? steps : valid_lens.length(b, 0);
    Scalar row = Scalar(0);
    for (Index t = 0; t < std::min(length, steps); ++t) {
      const Scalar* z = logits.data() + (b * steps + t) * classes;  // (classes)
      Scalar* g = loss.grad.data() + (b * steps + t) * classes;     // (classes)
      const Scalar m = *std::max_element(z, z + classes);
      Scalar sum = Scalar(0);
      for (Index c = 0; c < classes; ++c) sum += std::exp(z[c] - m);
      const Index label = labels(b, t);
      row += m + std::log(sum) - z[label];
      for (Index c = 0; c < classes; ++c) g[c] = std::exp(z[c] - m) / sum * scale;
      g[label] -= scale;
    }
    total += row / static_cast<Scalar>(steps);
  }
  loss.value = batch * steps == 0 ? std::numeric_limits<Scalar>::quiet_NaN() : total / static_cast<Scalar>(batch);
  return loss;
}

}  // namespace ATTEND_ABI
}  // namespace attend
