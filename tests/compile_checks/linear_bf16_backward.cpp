// expect: Linear<bfloat16> runs in evaluation only
// bfloat16 modules compute forward passes only: training runs in float (docs/USAGE.md, "Reduced precision").
#include <attend/linear.hpp>

void call(attend::Linear<attend::bfloat16>& linear, const attend::Tensor3<attend::bfloat16>& grad) {
  linear.backward(grad);
}
