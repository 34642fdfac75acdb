// expect: must be a rank-3 tensor
// The gradient of a Conv1d's output as a rank-2 map.
#include <attend/conv1d.hpp>

void call(attend::Conv1d<double>& conv, const double* g) {
  conv.backward(Eigen::TensorMap<const Eigen::Tensor<double, 2, Eigen::RowMajor>>(g, 16, 8));
}
