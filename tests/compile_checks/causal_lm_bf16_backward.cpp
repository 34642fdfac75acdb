// expect: CausalLM<bfloat16> runs in evaluation only
// bfloat16 models compute forward passes only: training runs in float (docs/USAGE.md, "Reduced precision").
#include <attend/causal_lm.hpp>

void call(attend::CausalLM<attend::bfloat16>& model, const attend::Tensor3<attend::bfloat16>& grad) {
  model.backward(grad);
}
