// expect: keys and values must be (batch, steps, features) tensors
// Rank-2 keys and values, (steps, features) without the batch axis, appended to a cache.
#include <attend/kv_cache.hpp>

void call(attend::KVCache<float>& cache, const Eigen::Tensor<float, 2, Eigen::RowMajor>& keys,
          const Eigen::Tensor<float, 2, Eigen::RowMajor>& values) {
  cache.append(keys, values);
}
