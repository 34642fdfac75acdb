// examples/from_pytorch.cpp — a PyTorch nn.MultiheadAttention, run by attend.
//
// examples/from_pytorch/export.py builds nn.MultiheadAttention(embed_dim=16, num_heads=4, batch_first=True) with a
// fixed seed, in float32, and writes its state_dict() to mha.safetensors, and an input X (2, 5, 16) with PyTorch's
// outputs on it to io.safetensors. This program loads the weights in three lines, runs X through attend's
// MultiHeadAttention, and prints how far attend's output is from PyTorch's: once without a mask, once with
// PyTorch's key_padding_mask (true = ignore this key) turned into attend's Mask (true = attend to this key).
//
// Both compute d2l's multi-head attention in float32, in different orders of summation, so the outputs differ by
// rounding only. The relative difference is taken against the largest |output| (an element near 0 divided by itself
// would make rounding look large): the program fails (exit status 1) when it exceeds 1e-5.
//
// usage: from_pytorch [output_directory]   (taken and created like every example's; this one only prints)
// The data files are found through ATTEND_FROM_PYTORCH_DIR, set by examples/CMakeLists.txt to the source directory.
#include <algorithm>
#include <attend/attend.hpp>
#include <cmath>
#include <exception>
#include <iomanip>
#include <iostream>
#include <string>

#include "plot.hpp"

#ifndef ATTEND_FROM_PYTORCH_DIR
#error "ATTEND_FROM_PYTORCH_DIR must be defined as a string literal naming examples/from_pytorch (a compile definition)"
#endif

namespace {

// A shape as PyTorch prints it: "(2, 4, 100)".
template <class Dims>
std::string shape_of(const Dims& dims) {
  std::string text = "(";
  for (std::size_t i = 0; i < dims.size(); ++i) text += (i ? ", " : "") + std::to_string(dims[i]);
  return text + ")";
}

using attend::Index;
using attend::Tensor3;

// Over every element a of attend's output and e of PyTorch's: the largest |a - e|, and that divided by the largest
// |e| (max |a - e| / max |e|).
struct Difference {
  double absolute = 0, relative = 0;
};

Difference difference(const Tensor3<float>& actual, const Tensor3<float>& expected) {
  double largest_difference = 0, largest_expected = 0;
  for (Index i = 0; i < expected.size(); ++i) {
    const double a = actual.data()[i], e = expected.data()[i];
    largest_difference = std::max(largest_difference, std::abs(a - e));
    largest_expected = std::max(largest_expected, std::abs(e));
  }
  return {largest_difference, largest_difference / largest_expected};
}

Difference report(const std::string& what, const Tensor3<float>& actual, const Tensor3<float>& expected) {
  const Difference d = difference(actual, expected);
  std::cout << "  " << std::left << std::setw(33) << what << std::right << std::scientific << std::setprecision(2)
            << "largest |a - e| = " << d.absolute << ", relative: max |a - e| / max |e| = " << d.relative << '\n'
            << std::defaultfloat;
  return d;
}

}  // namespace

int main(int argc, char** argv) try {
  attend_examples::output_directory(argc, argv);
  const std::string data = ATTEND_FROM_PYTORCH_DIR;

  // PyTorch's state_dict() -> attend's MultiHeadAttention: num_heads is not in a state dict, so it is given.
  auto weights = attend::load_safetensors<float>(data + "/mha.safetensors");
  auto attention = attend::multi_head_attention_from_torch<float>(weights, 4);
  attention.eval();

  std::cout << "nn.MultiheadAttention's state dict (" << data << "/mha.safetensors):\n";
  for (const auto& [name, tensor] : weights)
    std::cout << "  " << std::left << std::setw(16) << name << std::right << shape_of(tensor.shape)
              << '\n';
  std::cout << "as attend's MultiHeadAttention (d2l's names), " << attention.num_heads() << " heads of "
            << attention.num_hiddens() / attention.num_heads() << " features:\n";
  for (const auto& [name, tensor] : attention.state_dict())
    std::cout << "  " << std::left << std::setw(16) << name << std::right << shape_of(tensor.shape)
              << '\n';

  const auto io = attend::load_safetensors<float>(data + "/io.safetensors");
  const Tensor3<float> X = attend::to_tensor3(io, "X");  // (batch, steps, embed_dim) = (2, 5, 16)
  std::cout << "\nself-attention on X " << shape_of(X.dimensions())
            << ", float32; a = attend's output, e = PyTorch's:\n";

  // 1. No mask: module(X, X, X, need_weights=False)[0].
  const Tensor3<float> Y = attention(X, X, X);  // (2, 5, 16)
  const Difference plain = report("attention(X, X, X)", Y, attend::to_tensor3(io, "output"));

  // 2. PyTorch's key_padding_mask, (batch, keys), true where a key is padding: the opposite polarity of attend's
  //    Mask::keep. Batch row 0 has 3 real keys, row 1 has 5.
  const attend::Matrix<bool> padding =
      (attend::to_matrix(io, "key_padding_mask").array() != 0.0f).matrix();  // (2, 5), true = ignore
  const attend::Mask keep = attend::key_padding_mask_from_torch(padding, X.dimension(1));
  const Tensor3<float> Y_masked = attention(X, X, X, keep);  // (2, 5, 16)
  const Difference masked =
      report("attention(X, X, X, key padding)", Y_masked, attend::to_tensor3(io, "output_masked"));

  // The padding is a suffix of each row, so d2l's valid lengths say the same.
  const Tensor3<float> Y_lens = attention(X, X, X, attend::ValidLens{3, 5});
  const bool same = std::equal(Y_lens.data(), Y_lens.data() + Y_lens.size(), Y_masked.data());
  std::cout << "  with ValidLens{3, 5} instead of the key padding mask: " << (same ? "the same output" : "DIFFERENT")
            << '\n';

  const double worst = std::max(plain.relative, masked.relative);
  std::cout << (worst <= 1e-5 && same ? "attend agrees with PyTorch to float rounding (<= 1e-5 relative)\n"
                                      : "attend does NOT agree with PyTorch\n");
  return worst <= 1e-5 && same ? 0 : 1;
} catch (const std::exception& error) {
  std::cerr << "from_pytorch: " << error.what() << '\n';
  return 1;
}
