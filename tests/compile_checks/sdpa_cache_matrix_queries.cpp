// expect: must be a Tensor3 or a TensorMap of one
// A matrix, not a tensor, as the queries of the call against a KVCache.
#include <attend/kv_cache.hpp>
#include <attend/scaled_dot_product_attention.hpp>

void call(const Eigen::MatrixXf& queries, const attend::KVCache<float>& cache) {
  attend::scaled_dot_product_attention(queries, cache, 4);
}
