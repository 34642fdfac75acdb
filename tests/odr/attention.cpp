// The ODR test's object (run.cmake), compiled twice: with -march=x86-64 and SEED_ATTENTION=seed_attention_x86_64, and
// with -march=x86-64-v4 and SEED_ATTENTION=seed_attention_x86_64_v4. The same attend code in both.
#include "attention.hpp"

#include <attend/attend.hpp>

float SEED_ATTENTION() {
  attend::Generator generator(1);
  attend::MultiHeadAttention<float> attention(100, 100, 100, 100, 5, 0.0f, false, generator);
  attention.eval();
  attend::Tensor3<float> X(2, 4, 100);  // (batch, steps, features)
  X.setConstant(0.5f);
  const attend::Tensor3<float> Y = attention(X, X, X, attend::ValidLens{3, 2});  // (2, 4, 100)
  return Y(1, 3, 99);
}
