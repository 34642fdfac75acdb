// expect: GroupedQueryAttention<bfloat16> runs in evaluation only
// bfloat16 modules compute forward passes only: training runs in float (docs/USAGE.md, "Reduced precision").
#include <attend/grouped_query_attention.hpp>

void call(attend::GroupedQueryAttention<attend::bfloat16>& attention, const attend::Tensor3<attend::bfloat16>& grad) {
  attention.backward(grad);
}
