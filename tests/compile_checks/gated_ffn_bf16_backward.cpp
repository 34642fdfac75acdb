// expect: GatedFFN<bfloat16> runs in evaluation only
// bfloat16 modules compute forward passes only: training runs in float (docs/USAGE.md, "Reduced precision").
#include <attend/gated_ffn.hpp>

void call(attend::GatedFFN<attend::bfloat16>& ffn, const attend::Tensor3<attend::bfloat16>& grad) {
  ffn.backward(grad);
}
