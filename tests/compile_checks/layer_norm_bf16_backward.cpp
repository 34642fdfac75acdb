// expect: norms of bfloat16 run in evaluation only
// bfloat16 modules compute forward passes only: training runs in float (docs/USAGE.md, "Reduced precision").
#include <attend/layer_norm.hpp>

void call(attend::LayerNorm<attend::bfloat16>& norm, const attend::Tensor3<attend::bfloat16>& grad) {
  norm.backward(grad);
}
