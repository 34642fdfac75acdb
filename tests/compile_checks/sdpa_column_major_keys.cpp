// expect: must be row-major (Eigen::RowMajor)
// Eigen's default tensor, column-major, as the keys: its memory is not (batch, steps, features) rows.
#include <attend/scaled_dot_product_attention.hpp>

void call(const attend::Tensor3<float>& queries, const Eigen::Tensor<float, 3>& keys,
          const attend::Tensor3<float>& values) {
  attend::scaled_dot_product_attention(queries, keys, values, 4, 2);
}
