// attend/attention_gradients.hpp — what an attention module's backward() returns.
#pragma once

#include <attend/config.hpp>
#include <attend/tensor.hpp>

namespace attend {
inline namespace ATTEND_ABI {

// The gradients with respect to one call's three inputs, each of that input's shape. For self-attention (one tensor
// passed as queries, keys and values) the gradient with respect to that tensor is queries + keys + values.
template <class Scalar>
struct AttentionGradients {
  Tensor3<Scalar> queries;  // (batch, q, query features)
  Tensor3<Scalar> keys;     // (batch, k, key features)
  Tensor3<Scalar> values;   // (batch, k, value features)
};

}  // namespace ATTEND_ABI
}  // namespace attend
