// expect: ring_attention_backward takes float or double
// bfloat16 attention computes forward passes only: training runs in float (docs/USAGE.md, "Reduced precision").
#include <attend/distributed.hpp>

void call(const attend::Tensor3<attend::bfloat16>& x, const attend::Tensor3<attend::bfloat16>& lse) {
  attend::ring_attention_backward(MPI_COMM_WORLD, x, x, x, x, lse, x, 2, 2);
}
