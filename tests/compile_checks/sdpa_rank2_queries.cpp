// expect: must be a rank-3 tensor
// A rank-2 map, (steps, features) without the batch axis, as the queries.
#include <attend/scaled_dot_product_attention.hpp>

void call(const attend::ConstTensorMap3<float>& keys, const attend::ConstTensorMap3<float>& values, const float* q) {
  const Eigen::TensorMap<const Eigen::Tensor<float, 2, Eigen::RowMajor>> queries(q, 3, 8);
  attend::scaled_dot_product_attention(queries, keys, values, 4, 2);
}
