// expect: an output argument must be a Tensor3 or a TensorMap3 (not const)
// A read-only map as the output of the out-parameter forward.
#include <attend/multi_head_attention.hpp>

void call(const attend::MultiHeadAttention<float>& attention, const attend::Tensor3<float>& X,
          attend::AttentionWorkspace<float>& workspace, const float* y) {
  attention.forward(X, X, X, attend::Mask::causal(), workspace, attend::ConstTensorMap3<float>(y, 2, 16, 64));
}
