// expect: an output argument must be a Tensor3 or a TensorMap3 (not const)
// A read-only map as the out-parameter of forward().
#include <attend/grouped_query_attention.hpp>

void call(const attend::GroupedQueryAttention<float>& gqa, const attend::Tensor3<float>& X, const float* memory) {
  const attend::ConstTensorMap3<float> out(memory, 2, 3, 8);
  gqa.forward(X, attend::Mask::causal(), out);
}
