// The contract's example, compiled as outside code: prints "2 4 100".
#include <attend/attend.hpp>
#include <iostream>

int main() {
  const attend::Index num_hiddens = 100, num_heads = 5;
  attend::MultiHeadAttention<float> attention(num_hiddens, num_hiddens, num_hiddens, num_hiddens, num_heads, 0.5f);
  attention.eval();
  attend::Tensor3<float> X(2, 4, num_hiddens);
  X.setConstant(1.0f);
  auto Y = attention(X, X, X, attend::ValidLens{3, 2});
  std::cout << Y.dimension(0) << ' ' << Y.dimension(1) << ' ' << Y.dimension(2) << '\n';
}
