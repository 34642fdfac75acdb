// expect: must be a rank-3 tensor
// The backward pass given a rank-2 lse (queries, num_heads), without the batch axis.
#include <attend/scaled_dot_product_attention.hpp>

void call(const attend::Tensor3<float>& queries, const attend::Tensor3<float>& keys,
          const attend::Tensor3<float>& values, const attend::Tensor3<float>& output,
          const Eigen::Tensor<float, 2, Eigen::RowMajor>& lse, const attend::Tensor3<float>& grad_output) {
  attend::scaled_dot_product_attention_backward(queries, keys, values, output, lse, grad_output, 4, 2);
}
