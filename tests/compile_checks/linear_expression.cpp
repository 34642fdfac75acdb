// expect: must be a Tensor3 or a TensorMap of one
// An unevaluated expression: evaluating it would be a copy the call makes behind the caller's back.
#include <attend/linear.hpp>

void call(const attend::Linear<float>& linear, const attend::Tensor3<float>& X) {
  linear.forward(X * 2.0f);
}
