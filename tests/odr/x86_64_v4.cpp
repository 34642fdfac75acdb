// One of the two objects of the ODR test (run.cmake): the same attend code, compiled with -march=x86-64-v4.
#include "attention.hpp"

#include <attend/attend.hpp>

float seed_attention_x86_64_v4() {
  attend::Generator generator(1);
  attend::MultiHeadAttention<float> attention(100, 100, 100, 100, 5, 0.0f, false, generator);
  attention.eval();
  attend::Tensor3<float> X(2, 4, 100);  // (batch, steps, features)
  X.setConstant(0.5f);
  const attend::Tensor3<float> Y = attention(X, X, X, attend::ValidLens{3, 2});  // (2, 4, 100)
  return Y(1, 3, 99);
}
