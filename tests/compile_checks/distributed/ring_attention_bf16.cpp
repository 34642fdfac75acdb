// expect: ring_attention takes float or double
// Ring attention runs in float or double: a bfloat16 model's attention is widened first (docs/USAGE.md).
#include <attend/distributed.hpp>

void call(const attend::Tensor3<attend::bfloat16>& x) { attend::ring_attention(MPI_COMM_WORLD, x, x, x, 2, 2); }
