// expect: must be row-major (Eigen::RowMajor)
// A column-major tensor of the right rank: its memory is not (batch, steps, features) rows.
#include <attend/rnn.hpp>

void call(attend::RNN<float>& rnn, const Eigen::Tensor<float, 3>& X) {
  rnn(X);
}
