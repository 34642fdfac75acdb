// expect: attention modules of bfloat16 run in evaluation only
// bfloat16 modules compute forward passes only: training runs in float (docs/USAGE.md, "Reduced precision").
#include <attend/multi_head_attention.hpp>

void call(attend::MultiHeadAttention<attend::bfloat16>& attention, const attend::Tensor3<attend::bfloat16>& grad) {
  attention.backward(grad);
}
