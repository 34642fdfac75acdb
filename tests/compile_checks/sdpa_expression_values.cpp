// expect: must be a Tensor3 or a TensorMap of one
// An unevaluated expression as the values: it has no memory to read in place.
#include <attend/scaled_dot_product_attention.hpp>

void call(const attend::Tensor3<float>& queries, const attend::Tensor3<float>& keys, const attend::Tensor3<float>& X) {
  attend::scaled_dot_product_attention(queries, keys, X * 2.0f, 4, 2);
}
