// attend/transpose_qkv.hpp — d2l's head layout for multi-head attention, and its inverse.
//
// transpose_qkv:    (batch, steps, num_heads * d) -> (batch * num_heads, steps, d)
//                   row b * num_heads + h holds head h of batch row b (features h*d .. h*d + d - 1)
// transpose_output: (batch * num_heads, steps, d) -> (batch, steps, num_heads * d), the exact inverse
//
// MultiHeadAttention does not call these: it reads each head through a strided view instead of copying.
// They are the literal route of the seed's code, kept public for users and for the tests that compare the two.
#pragma once

#include <attend/config.hpp>

#include <attend/detail/views.hpp>
#include <attend/tensor.hpp>

namespace attend {
inline namespace ATTEND_ABI {

// X is a Tensor3 or a map of one (TensorMap3, ConstTensorMap3), read in place.
template <class Input, class Scalar = detail::argument_scalar<Input>>
Tensor3<Scalar> transpose_qkv(const Input& input, Index num_heads) {
  const ConstTensorMap3<Scalar> X = detail::input3<Scalar>(input);
  detail::require(num_heads >= 1, "transpose_qkv: num_heads must be at least 1, got ", num_heads);
  const Index batch = X.dimension(0), steps = X.dimension(1), width = X.dimension(2);
  detail::require(width % num_heads == 0, "transpose_qkv: X's features (", width, ") must be divisible by num_heads (",
                  num_heads, "), got shape ", detail::shape_text(X.dimensions()));
  const Index d = width / num_heads;
  // (batch, steps, heads, d) -> (batch, heads, steps, d) -> (batch * heads, steps, d)
  const Eigen::array<Index, 4> split{batch, steps, num_heads, d};
  const Eigen::array<Index, 4> order{0, 2, 1, 3};
  const Eigen::array<Index, 3> merged{batch * num_heads, steps, d};
  return X.reshape(split).shuffle(order).reshape(merged);
}

template <class Input, class Scalar = detail::argument_scalar<Input>>
Tensor3<Scalar> transpose_output(const Input& input, Index num_heads) {
  const ConstTensorMap3<Scalar> X = detail::input3<Scalar>(input);
  detail::require(num_heads >= 1, "transpose_output: num_heads must be at least 1, got ", num_heads);
  const Index rows = X.dimension(0), steps = X.dimension(1), d = X.dimension(2);
  detail::require(rows % num_heads == 0, "transpose_output: X's first axis (", rows,
                  ") must be divisible by num_heads (", num_heads, "), got shape ",
                  detail::shape_text(X.dimensions()));
  const Index batch = rows / num_heads;
  // (batch * heads, steps, d) -> (batch, heads, steps, d) -> (batch, steps, heads, d) -> (batch, steps, heads * d)
  const Eigen::array<Index, 4> split{batch, num_heads, steps, d};
  const Eigen::array<Index, 4> order{0, 2, 1, 3};
  const Eigen::array<Index, 3> merged{batch, steps, num_heads * d};
  return X.reshape(split).shuffle(order).reshape(merged);
}

}  // namespace ATTEND_ABI
}  // namespace attend
