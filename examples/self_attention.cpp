// examples/self_attention.cpp — the chapter's example: multi-head self-attention on a batch of two sequences.
//
// In self-attention the tokens of one sequence are the queries, the keys and the values at once:
// attention(X, X, X) lets every position gather information from every position of its own sequence, and the
// output has the shape of X. Over n tokens of d features it costs O(n^2 d), more than a convolution or an RNN,
// but it needs O(1) sequential operations and any two tokens are one step apart (maximum path length O(1)).
// It is also blind to order, which is why positional encoding exists (see positional_encoding.cpp).
//
// Here X is (2, 4, 100), all ones, with valid lengths {3, 2}: batch row 0 attends to its first 3 keys, row 1 to
// its first 2. The rows of X are identical, so every kept key gets the same score, hence the same weight.
//
// usage: self_attention [output_directory]   (taken and created like every example's; this one only prints)
#include <algorithm>
#include <attend/attend.hpp>
#include <cmath>
#include <exception>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>

#include "plot.hpp"

namespace {

using attend::Index;

// "torch.Size([2, 4, 100])": a shape the way PyTorch prints it.
std::string torch_size(const attend::Tensor3<float>& X) {
  std::ostringstream out;
  out << "torch.Size([" << X.dimension(0) << ", " << X.dimension(1) << ", " << X.dimension(2) << "])";
  return out.str();
}

// Prints head h of batch row b as a (queries, keys) table; weights: (batch * num_heads, queries, keys).
void print_head(const attend::Tensor3<float>& weights, Index num_heads, Index b, Index h) {
  const Index row = b * num_heads + h;  // d2l's layout: head h of batch row b
  std::cout << "       ";
  for (Index k = 0; k < weights.dimension(2); ++k) std::cout << std::setw(12) << "key " + std::to_string(k);
  std::cout << '\n';
  for (Index q = 0; q < weights.dimension(1); ++q) {
    std::cout << "query " << q;
    for (Index k = 0; k < weights.dimension(2); ++k) std::cout << std::setw(12) << weights(row, q, k);
    std::cout << '\n';
  }
}

// Over all heads and queries of batch row b: the largest distance of a kept weight from 1 / valid_len,
// and the largest masked weight (keys >= valid_len).
void check_row(const attend::Tensor3<float>& weights, Index num_heads, Index b, Index valid_len) {
  const float uniform = 1.0f / static_cast<float>(valid_len);
  float kept_error = 0.0f, masked_max = 0.0f;
  for (Index h = 0; h < num_heads; ++h)
    for (Index q = 0; q < weights.dimension(1); ++q)
      for (Index k = 0; k < weights.dimension(2); ++k) {
        const float w = weights(b * num_heads + h, q, k);
        if (k < valid_len)
          kept_error = std::max(kept_error, std::abs(w - uniform));
        else
          masked_max = std::max(masked_max, w);
      }
  std::cout << "all " << num_heads << " heads of row " << b << ": max |kept weight - 1/" << valid_len
            << "| = " << kept_error << ", max masked weight = " << masked_max
            << (masked_max == 0.0f ? " (exactly 0)" : " (NOT exactly 0)") << '\n';
}

}  // namespace

int main(int argc, char** argv) try {
  attend_examples::output_directory(argc, argv);
  const Index num_hiddens = 100, num_heads = 5;
  const Index batch_size = 2, num_queries = 4;

  // key_size, query_size, value_size, num_hiddens, num_heads, dropout — the chapter's arguments
  attend::MultiHeadAttention<float> attention(num_hiddens, num_hiddens, num_hiddens, num_hiddens, num_heads, 0.5f);
  attention.eval();  // evaluation mode: no dropout

  attend::Tensor3<float> X(batch_size, num_queries, num_hiddens);  // (2, 4, 100)
  X.setConstant(1.0f);
  const attend::ValidLens valid_lens{3, 2};  // (2,): one length per batch row

  const attend::Tensor3<float> Y = attention(X, X, X, valid_lens);  // (2, 4, 100): same shape as X
  std::cout << "attention(X, X, X, valid_lens).shape\n" << torch_size(Y) << "\n\n";

  const attend::Tensor3<float>& weights = attention.attention_weights();  // (batch * num_heads, 4, 4) = (10, 4, 4)
  std::cout << "attention_weights: " << torch_size(weights) << " = (batch * num_heads, queries, keys)\n\n";

  std::cout << "head 0 of batch row 0, valid length 3: keys 0-2 share the weight equally, key 3 is masked to 0\n";
  print_head(weights, num_heads, 0, 0);
  check_row(weights, num_heads, 0, 3);

  std::cout << "\nhead 0 of batch row 1, valid length 2: keys 0-1 share the weight equally, keys 2-3 are masked to 0\n";
  print_head(weights, num_heads, 1, 0);
  check_row(weights, num_heads, 1, 2);
  return 0;
} catch (const std::exception& error) {
  std::cerr << "self_attention: " << error.what() << '\n';
  return 1;
}
