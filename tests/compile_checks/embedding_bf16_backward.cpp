// expect: Embedding<bfloat16> runs in evaluation only
// bfloat16 modules compute forward passes only: training runs in float (docs/USAGE.md, "Reduced precision").
#include <attend/embedding.hpp>

void call(attend::Embedding<attend::bfloat16>& embedding, const attend::Tensor3<attend::bfloat16>& grad) {
  embedding.backward(grad);
}
