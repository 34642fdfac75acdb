// expect: every tensor argument of a call must have the call's scalar type
// A double tensor given to a float module.
#include <attend/grouped_query_attention.hpp>

void call(attend::GroupedQueryAttention<float>& gqa, const attend::Tensor3<double>& X) { gqa(X); }
