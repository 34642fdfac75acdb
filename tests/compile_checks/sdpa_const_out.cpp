// expect: an output argument must be a Tensor3 or a TensorMap3 (not const)
// A read-only map as the out-parameter.
#include <attend/scaled_dot_product_attention.hpp>

void call(const attend::Tensor3<float>& queries, const attend::Tensor3<float>& keys,
          const attend::Tensor3<float>& values, const float* memory) {
  const attend::ConstTensorMap3<float> out(memory, 2, 3, 8);
  attend::scaled_dot_product_attention(queries, keys, values, 4, 2, {}, {}, nullptr, out);
}
