// expect: every tensor argument of a call must have the call's scalar type
// Double keys for a float module.
#include <attend/dot_product_attention.hpp>

void call(attend::DotProductAttention<float>& attention, const attend::Tensor3<float>& Q,
          const attend::Tensor3<double>& K) {
  attention.forward(Q, K, K);
}
