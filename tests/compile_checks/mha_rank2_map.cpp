// expect: must be a rank-3 tensor
// A rank-2 map of the program's memory, (steps, features) without the batch axis, as self-attention's input.
#include <attend/multi_head_attention.hpp>

void call(attend::MultiHeadAttention<float>& attention, const float* x) {
  const Eigen::TensorMap<const Eigen::Tensor<float, 2, Eigen::RowMajor>> X(x, 16, 64);
  attention(X, X, X);
}
