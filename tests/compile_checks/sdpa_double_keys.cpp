// expect: every tensor argument of a call must have the call's scalar type
// Float queries (the call's scalar type) with double keys.
#include <attend/scaled_dot_product_attention.hpp>

void call(const attend::Tensor3<float>& queries, const attend::Tensor3<double>& keys,
          const attend::Tensor3<float>& values) {
  attend::scaled_dot_product_attention(queries, keys, values, 4, 2);
}
