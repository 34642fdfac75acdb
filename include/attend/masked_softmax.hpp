// attend/masked_softmax.hpp — softmax over the last axis after d2l's masking.
//
// masked_softmax(X, mask): X (batch, queries, keys) -> weights (batch, queries, keys).
// The mask is a Mask or anything that converts to one (a ValidLens); see mask.hpp for its parts and rules.
// Scores of masked keys are *replaced* by -1e6 before the softmax (d2l's sequence_mask(..., value=-1e6)), so a query
// that sees no key gets uniform weights 1/keys, exactly as the seed's code (FullyMasked::uniform), or a row of
// zeros (FullyMasked::zero).
#pragma once

#include <attend/config.hpp>

#include <attend/detail/kernels.hpp>
#include <attend/detail/mask_row.hpp>
#include <attend/detail/softmax.hpp>
#include <attend/detail/views.hpp>
#include <attend/mask.hpp>
#include <attend/tensor.hpp>
#include <attend/valid_lens.hpp>

namespace attend {
inline namespace ATTEND_ABI {

// X: (batch, queries, keys) -> (batch, queries, keys)
// mask: none; a ValidLens (batch,) or (batch, queries); or any Mask (see mask.hpp), keep tensor (batch or 1, queries,
// keys).
// X is a Tensor3 or a map of one (TensorMap3, ConstTensorMap3), read in place, as Y and dY below.
template <class Input, class Scalar = detail::argument_scalar<Input>>
Tensor3<Scalar> masked_softmax(const Input& input, const Mask& mask = {}) {
  const ConstTensorMap3<Scalar> X = detail::input3<Scalar>(input);
  mask.require_shape(X.dimension(0), X.dimension(1), X.dimension(2), "masked_softmax");
  Tensor3<Scalar> weights = X;  // (batch, queries, keys)
  for (Index b = 0; b < X.dimension(0); ++b) {
    auto block = detail::slice(weights, b);  // (queries, keys)
    detail::masked_softmax_block(block, mask, b);
  }
  return weights;
}

// The gradient of masked_softmax: Y = masked_softmax(X, mask), dY = dL/dY -> dX = dL/dX, all (batch, queries, keys).
// In a row, with s = sum_k Y_k dY_k, dX_j = Y_j (dY_j - s) for a key j the row sees and 0 for a masked one: its score
// was replaced (by -1e6) before the softmax, so it does not depend on X at all. A query that sees no key gets a zero
// row, whatever the mask's FullyMasked rule (detail/kernels/softmax-inl.hpp). Y must be what masked_softmax(X, mask)
// gave.
template <class Output, class GradOutput, class Scalar = detail::argument_scalar<Output>>
Tensor3<Scalar> masked_softmax_backward(const Output& output, const GradOutput& grad_output, const Mask& mask = {}) {
  constexpr const char* where = "masked_softmax_backward";
  const ConstTensorMap3<Scalar> Y = detail::input3<Scalar>(output), dY = detail::input3<Scalar>(grad_output);
  const Index batch = Y.dimension(0), num_queries = Y.dimension(1), num_keys = Y.dimension(2);
  detail::require_shape(dY, {batch, num_queries, num_keys}, where, "grad_Y", "(Y's shape: batch, queries, keys)");
  mask.require_shape(batch, num_queries, num_keys, where);
  Tensor3<Scalar> dX(batch, num_queries, num_keys);  // (batch, queries, keys)
  const detail::Kernels<Scalar>& kernel = detail::kernels<Scalar>();
  for (Index b = 0; b < batch; ++b)
    for (Index q = 0; q < num_queries; ++q) {
      const Index row = (b * num_queries + q) * num_keys;
      kernel.softmax_backward_row(Y.data() + row, dY.data() + row, dX.data() + row, num_keys,
                                  mask.visible_keys(b, q, num_queries, num_keys), Scalar(1));
    }
  return dX;
}

}  // namespace ATTEND_ABI
}  // namespace attend
