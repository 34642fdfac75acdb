// expect: must be a Tensor3 or a TensorMap of one
// A matrix of scores, (queries, keys), where (batch, queries, keys) is meant.
#include <attend/masked_softmax.hpp>

void call(const attend::Matrix<float>& scores) {
  attend::masked_softmax(scores);
}
