// expect: scaled_dot_product_attention_backward takes float or double
// bfloat16 attention computes forward passes only: training runs in float (docs/USAGE.md, "Reduced precision").
#include <attend/scaled_dot_product_attention.hpp>

void call(const attend::Tensor3<attend::bfloat16>& x, const attend::Tensor3<attend::bfloat16>& lse) {
  attend::scaled_dot_product_attention_backward(x, x, x, x, lse, x, 2, 2);
}
