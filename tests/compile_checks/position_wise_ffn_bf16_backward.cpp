// expect: PositionWiseFFN<bfloat16> runs in evaluation only
// bfloat16 modules compute forward passes only: training runs in float (docs/USAGE.md, "Reduced precision").
#include <attend/position_wise_ffn.hpp>

void call(attend::PositionWiseFFN<attend::bfloat16>& ffn, const attend::Tensor3<attend::bfloat16>& grad) {
  ffn.backward(grad);
}
